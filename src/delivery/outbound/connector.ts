import net, { type LookupFunction } from 'node:net';
import tls from 'node:tls';
import { errors, type buildConnector } from 'undici';
import { LruMap } from '../../lib/lru-map.js';
import { connectThroughProxy, unbracketed, type EgressProxy } from './egress-proxy.js';

/** How a new connection to a receiver was made: plain TCP, or TLS with a full handshake or a resumed session. */
export type ConnectionKind = 'plain' | 'tls_full' | 'tls_resumed';

export interface ConnectorOptions {
  /** Bound on TCP connect plus the TLS handshake. */
  connectTimeoutMs: number;
  /** Name resolution (the SSRF guard's checked lookup); default net's. */
  lookup?: LookupFunction;
  /** TLS sessions kept for resumption at most: one per server name and port, least recently used forgotten first. */
  tlsSessions: number;
  /** Told of every connection once it is established. */
  onConnected?: (kind: ConnectionKind) => void;
  /**
   * CA certificates (PEM) trusted besides Node's bundled ones, for tests that cannot set
   * NODE_EXTRA_CA_CERTS before their process starts; deployments use NODE_EXTRA_CA_CERTS.
   */
  extraCa?: string;
  /**
   * The TLS sessions kept, when shared with other connectors (one per client certificate): keys
   * then start with `sessionScope`, so a session made with one certificate never resumes for another.
   */
  sessions?: LruMap<string, Buffer>;
  sessionScope?: string;
  /** mTLS: the certificate (PEM, with its chain) and key every TLS connection presents. */
  clientCertificate?: { certPem: string; keyPem: string };
  /** HOOKLINE_EGRESS_PROXY: connections are tunnelled through it (CONNECT to the checked address). */
  proxy?: EgressProxy;
}

/** TCP keep-alive probes start after a minute idle, as undici's own connector does. */
const TCP_KEEPALIVE_DELAY_MS = 60_000;

/**
 * The server name a TLS connection sends (SNI) and keys its session under: the request's host
 * without its port; none for an IP literal, which SNI may not carry.
 */
export function serverNameOf(host: string): string | undefined {
  const name = host.startsWith('[') ? host.slice(1, host.indexOf(']')) : host.replace(/:\d*$/, '');
  return name === '' || net.isIP(name) !== 0 ? undefined : name;
}

/**
 * undici's connector, with one difference that matters at low rates: the TLS sessions it keeps
 * for resumption are held strongly, in one bounded LRU for the process. undici's own cache lives
 * in each origin's pool, which is closed with its last connection, and holds sessions through
 * WeakRefs the collector clears: a receiver that closes idle connections after 5 s and gets an
 * event every few seconds paid a full handshake (~1.5 ms of CPU) for every delivery. Resuming costs
 * a fraction of that. Each connection is reported once established (plain, TLS full or resumed).
 */
export function createConnector(options: ConnectorOptions): buildConnector.connector {
  const sessions = options.sessions ?? new LruMap<string, Buffer>(options.tlsSessions);
  const scope = options.sessionScope ?? '';
  // One context for every connection: tls.connect would otherwise build a context (and load the CA
  // store into it) for each new connection.
  const client = options.clientCertificate;
  const secureContext = tls.createSecureContext({
    ...(options.extraCa === undefined ? {} : { ca: [...tls.rootCertificates, options.extraCa] }),
    ...(client === undefined ? {} : { cert: client.certPem, key: client.keyPem }),
  });
  const { lookup, onConnected, proxy } = options;
  return ({ hostname, host, protocol, port, servername, localAddress }, callback) => {
    const secure = protocol === 'https:';
    const portNumber = Number(port) || (secure ? 443 : 80);
    const name = secure ? servername || serverNameOf(host ?? hostname) : undefined;
    const sessionKey = `${scope}${name ?? hostname}:${portNumber}`;
    /** TLS over `transport` (a tunnel), or a connection of its own to the receiver. */
    const startTls = (transport?: net.Socket): tls.TLSSocket => {
      const tlsSocket = tls.connect({
        ...(transport === undefined
          ? {
              host: hostname,
              port: portNumber,
              ...(localAddress ? { localAddress } : {}),
              ...(lookup ? { lookup } : {}),
            }
          : // Over a tunnel, `host` is only what the certificate is checked against: without it (an
            // IP literal sends no server name), Node would check it against "localhost".
            { socket: transport, host: unbracketed(hostname) }),
        ...(name === undefined ? {} : { servername: name }),
        session: sessions.get(sessionKey),
        secureContext,
        ALPNProtocols: ['http/1.1'],
      });
      // TLS 1.3 sends its tickets after the handshake, sometimes more than one: the newest is kept.
      tlsSocket.on('session', (session: Buffer) => sessions.set(sessionKey, session));
      return tlsSocket;
    };

    let pending = true;
    /** The socket that is connecting now: the timer destroys it. */
    let current: net.Socket;
    const settle = (error: Error | null) => {
      if (!pending) return;
      pending = false;
      clearTimeout(timer);
      if (error) callback(error, null);
      else callback(null, current);
    };
    const timer = setTimeout(() => {
      const error = new errors.ConnectTimeoutError(
        `connect timeout: ${hostname}:${portNumber} (${options.connectTimeoutMs} ms)`,
      );
      settle(error);
      current.destroy(error);
    }, options.connectTimeoutMs);
    /** Reports `socket` once it is up (connected, or its handshake done), or its failure. */
    const watch = (socket: net.Socket, upEvent: 'connect' | 'secureConnect') => {
      current = socket;
      socket.setKeepAlive(true, TCP_KEEPALIVE_DELAY_MS).setNoDelay(true);
      socket.once(upEvent, () => {
        const kind: ConnectionKind = !secure
          ? 'plain'
          : (socket as tls.TLSSocket).isSessionReused()
            ? 'tls_resumed'
            : 'tls_full';
        onConnected?.(kind);
        settle(null);
      });
      // A connection that failed before it was up forgets its session, in case the session was why.
      socket.on('error', (error: Error) => {
        if (pending && secure) sessions.delete(sessionKey);
        settle(error);
      });
    };

    if (proxy === undefined) {
      watch(
        secure
          ? startTls()
          : net.connect({
              host: hostname,
              port: portNumber,
              ...(localAddress ? { localAddress } : {}),
              ...(lookup ? { lookup } : {}),
            }),
        secure ? 'secureConnect' : 'connect',
      );
      return;
    }
    // Through the egress proxy: the tunnel goes to the address the lookup checked; TLS (SNI the
    // name) and the Host header then run inside it as on a direct connection.
    current = connectThroughProxy(
      {
        proxy,
        hostname,
        port: portNumber,
        ...(lookup ? { lookup } : {}),
        ...(localAddress ? { localAddress } : {}),
      },
      (error, tunnel) => {
        if (error || tunnel === null) return settle(error ?? new Error('egress proxy gave no tunnel'));
        if (!secure) {
          current = tunnel;
          tunnel.setKeepAlive(true, TCP_KEEPALIVE_DELAY_MS);
          onConnected?.('plain');
          return settle(null);
        }
        watch(startTls(tunnel), 'secureConnect');
      },
    );
  };
}
