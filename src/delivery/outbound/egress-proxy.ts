/**
 * Deliveries through a static-egress HTTP proxy (HOOKLINE_EGRESS_PROXY), so receivers can
 * allow-list one address. The SSRF guard must hold through the proxy: if the proxy resolved the
 * receiver's name, DNS could steer it to a private address the engine never checked. So the engine
 * resolves the name itself with its guarded lookup and asks the proxy to CONNECT to the checked IP
 * address, never to the name. The tunnel is a plain byte stream: the caller does TLS over it (SNI =
 * the name) and sends the Host header (= the name), exactly as on a direct connection.
 */
import dns from 'node:dns';
import net, { type LookupFunction } from 'node:net';

/** Where the egress proxy listens, and the credentials it wants. */
export interface EgressProxy {
  host: string;
  port: number;
  /** 'Basic …' when the URL had credentials */
  authorization?: string;
}

/** A proxy that did not open the tunnel: it answered with a status other than 2xx, or not at all. */
class ProxyConnectError extends Error {
  override name = 'ProxyConnectError';
  readonly code = 'ERR_HOOKLINE_PROXY_CONNECT';
  /** The proxy's status, when it answered. */
  readonly statusCode: number | undefined;

  constructor(message: string, statusCode?: number) {
    super(message);
    this.statusCode = statusCode;
  }
}

/**
 * The egress proxy itself could not be reached: the connection to it failed before it was up
 * (refused, no route, its name unresolved). The message is the attempt's, shown to vendors, so it
 * says what happened without the proxy's address, which maps the installation's network; the
 * address and the socket's own error are kept for the operator's log line (`address`, `reason`).
 * The socket's error is no `cause`: the sender would read it into the vendor's message and class.
 */
export class ProxyUnreachableError extends Error {
  override name = 'ProxyUnreachableError';
  readonly code = 'ERR_HOOKLINE_PROXY_UNREACHABLE';

  constructor(
    /** `host:port` of the proxy. */
    readonly address: string,
    /** The socket's error, as Node words it (with the address). */
    readonly reason: string,
    socketCode: string | undefined,
  ) {
    super(`the installation's egress proxy is unreachable${socketCode === undefined ? '' : ` (${socketCode})`}`);
  }
}

interface ProxyConnectOptions {
  proxy: EgressProxy;
  /** The receiver's name (or IP literal), resolved here with `lookup`. */
  hostname: string;
  port: number;
  /** The SSRF guard's checked lookup; default dns.lookup. */
  lookup?: LookupFunction;
  /** The local address of the connection to the proxy. */
  localAddress?: string;
}

/** A proxy's response head longer than this is not a CONNECT answer; the connection is dropped. */
const RESPONSE_HEAD_BYTES_MAX = 16 * 1024;

/**
 * Opens a tunnel to `hostname:port` through the proxy: resolves the name with `lookup`, connects to
 * the proxy, sends CONNECT to the resolved address and calls back exactly once, with the socket once
 * the proxy answered 2xx or with the error (the socket then destroyed). Returns that socket at once,
 * so the caller's connect timer can destroy it: there is no timer here.
 */
export function connectThroughProxy(
  options: ProxyConnectOptions,
  callback: (error: Error | null, socket: net.Socket | null) => void,
): net.Socket {
  const { proxy, port } = options;
  const socket = new net.Socket();
  socket.setNoDelay(true);

  /** `address:port` as CONNECT names it, once the name is resolved. */
  let target = '';
  let head = Buffer.alloc(0);
  let pending = true;
  /** Whether the connection to the proxy is up: an error before it is the proxy being unreachable. */
  let connected = false;
  const settle = (error: Error | null) => {
    if (!pending) return;
    pending = false;
    socket.off('readable', onReadable).off('error', onError).off('close', onClose);
    if (error === null) return callback(null, socket);
    socket.destroy();
    callback(error, null);
  };
  const onError = (error: NodeJS.ErrnoException) => {
    if (connected) return settle(error);
    const address = proxy.host.includes(':') ? `[${proxy.host}]:${proxy.port}` : `${proxy.host}:${proxy.port}`;
    settle(new ProxyUnreachableError(address, error.message, error.code));
  };
  const onClose = () => settle(new ProxyConnectError('egress proxy closed the connection before answering CONNECT'));
  const onReadable = () => {
    let chunk: Buffer | null;
    while ((chunk = socket.read() as Buffer | null) !== null) {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end === -1 && head.length <= RESPONSE_HEAD_BYTES_MAX) continue;
      if (end === -1) return settle(new ProxyConnectError('egress proxy sent an oversized answer to CONNECT'));
      // Whatever follows the head is the tunnel's first bytes, the caller's to read.
      if (end + 4 < head.length) socket.unshift(head.subarray(end + 4));
      return settle(tunnelRefusal(head.subarray(0, end).toString('latin1'), target));
    }
  };
  // Listening from the start: a caller that destroys the socket while the name resolves is told once, through 'close'.
  socket.on('readable', onReadable).on('error', onError).on('close', onClose);
  socket.once('connect', () => (connected = true));

  // The proxy is not asked anything before the name has passed the guard: a blocked name costs no connection.
  resolveAddress(options.hostname, options.lookup, (error, address) => {
    if (!pending || socket.destroyed) return;
    if (error !== null) return settle(error);
    target = net.isIPv6(address) ? `[${address}]:${port}` : `${address}:${port}`;
    socket.connect({
      host: proxy.host,
      port: proxy.port,
      ...(options.localAddress ? { localAddress: options.localAddress } : {}),
    });
    // Written at once; net sends it when the connection is up.
    const authorization = proxy.authorization === undefined ? '' : `Proxy-Authorization: ${proxy.authorization}\r\n`;
    socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${authorization}\r\n`);
  });
  return socket;
}

/** A host as undici hands it over (a URL's hostname), an IPv6 literal without its brackets. */
export function unbracketed(hostname: string): string {
  return hostname.startsWith('[') && hostname.endsWith(']') ? hostname.slice(1, -1) : hostname;
}

/**
 * The one IP address to tunnel to: an IP literal as it is, a name through `lookup`. Whatever the
 * lookup answers must be an IP address: a name handed on would be resolved by the proxy, unchecked.
 */
function resolveAddress(
  hostname: string,
  lookup: LookupFunction = dns.lookup,
  callback: (error: Error | null, address: string) => void,
): void {
  const name = unbracketed(hostname);
  if (net.isIP(name) !== 0) return callback(null, name);
  // The single-address form; the guard's own errors (ERR_HOOKLINE_SSRF_BLOCKED) pass through unchanged.
  lookup(name, {}, (error, address) => {
    if (error) return callback(error, '');
    const first = Array.isArray(address) ? address[0]?.address : address;
    if (first === undefined || net.isIP(first) === 0) {
      return callback(Object.assign(new Error(`${name} resolves to no address`), { code: 'ENOTFOUND' }), '');
    }
    callback(null, first);
  });
}

/** Null when the proxy's response head opens the tunnel (2xx), else why not. */
function tunnelRefusal(head: string, target: string): ProxyConnectError | null {
  const statusLine = head.split('\r\n', 1)[0] ?? '';
  const match = /^HTTP\/1\.[01] (\d{3})(?: (.*))?$/.exec(statusLine);
  if (match === null) return new ProxyConnectError(`egress proxy answered CONNECT to ${target} with no HTTP status`);
  const status = Number(match[1]);
  if (status >= 200 && status < 300) return null;
  // The reason phrase is the proxy's text: kept short and printable for the attempt log.
  const reason = (match[2] ?? '').replace(/[^\x20-\x7e]/g, '').slice(0, 100);
  return new ProxyConnectError(`egress proxy refused CONNECT to ${target}: ${status} ${reason}`.trim(), status);
}
