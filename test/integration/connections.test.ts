import type dns from 'node:dns';
import type { LookupAddress } from 'node:dns';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type Server } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { afterEach, describe, expect, inject, it } from 'vitest';
import type { ConnectionKind } from '../../src/delivery/outbound/connector.js';
import { HttpSender, type HttpSenderOptions } from '../../src/delivery/outbound/http-sender.js';
import { TEST_DOMAIN } from '../helpers/test-ca.js';
import { waitFor } from '../helpers/wait.js';

const testCa = inject('testCa');

/** A receiver that answers 200, notes whether each request's TLS session was resumed, and closes idle connections after `idleMs`. */
async function receiver(tls: boolean, idleMs: number) {
  const requests: { resumed: boolean | undefined }[] = [];
  const open = new Set<Socket>();
  const handler = (
    req: { socket: Socket; resume(): void; on(e: 'end', f: () => void): void },
    res: { end(): void },
  ) => {
    const socket = req.socket as Partial<TLSSocket>;
    requests.push({ resumed: socket.isSessionReused?.() });
    req.resume();
    req.on('end', () => res.end());
  };
  const server: Server = tls
    ? createHttpsServer({ cert: testCa!.cert, key: testCa!.key }, handler)
    : createHttpServer(handler);
  server.keepAliveTimeout = idleMs;
  server.on(tls ? 'secureConnection' : 'connection', (socket: Socket) => {
    open.add(socket);
    socket.on('close', () => open.delete(socket));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    requests,
    /** Resolves once the receiver has closed every connection (its idle timeout passed). */
    idle: () => waitFor(() => open.size === 0, 5_000, 'the receiver to close its idle connections'),
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** Every `*.hookline.test` name resolves to 127.0.0.1, as a public name would to its receiver. */
const loopbackLookup = ((_hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
  const address: LookupAddress = { address: '127.0.0.1', family: 4 };
  if (options.all) callback(null, [address]);
  else callback(null, address.address, address.family);
}) as unknown as HttpSenderOptions['lookup'];

describe.skipIf(testCa === undefined)('connections to receivers: reuse, TLS session resumption, counts', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  function sender(options: Partial<HttpSenderOptions> = {}) {
    const kinds: ConnectionKind[] = [];
    const s = new HttpSender({
      allowPrivateTargets: true,
      connectTimeoutMs: 2_000,
      maxResponseBytes: 64 * 1024,
      snippetBytes: 1024,
      userAgent: 'hookline-test',
      lookup: loopbackLookup,
      onConnected: (kind) => kinds.push(kind),
      // Trusted explicitly: a test process may have started before the global setup set
      // NODE_EXTRA_CA_CERTS (vitest reuses its workers across projects).
      extraCa: readFileSync(testCa!.caPath, 'utf8'),
      ...options,
    });
    closers.push(() => s.close(0));
    return { send: (url: string) => s.send({ url, headers: {}, body: '{}', timeoutMs: 5_000 }), kinds };
  }

  it('resumes the TLS session of a receiver that closes idle connections, every time after the first contact', async () => {
    const r = await receiver(true, 200);
    closers.push(r.close);
    const { send, kinds } = sender();
    for (let i = 0; i < 5; i++) {
      const result = await send(`https://one.${TEST_DOMAIN}:${r.port}/hook`);
      expect(result).toMatchObject({ kind: 'response', status: 200 });
      await r.idle();
    }
    expect(kinds).toEqual(['tls_full', 'tls_resumed', 'tls_resumed', 'tls_resumed', 'tls_resumed']);
    expect(r.requests.map((q) => q.resumed)).toEqual([false, true, true, true, true]);
  });

  it('keeps one session per server name, the least recently used forgotten beyond the bound', async () => {
    const r = await receiver(true, 100);
    closers.push(r.close);
    const names = Array.from({ length: 6 }, (_, i) => `r${i}.${TEST_DOMAIN}`);
    const roomy = sender();
    const tight = sender({ tlsSessions: 3 });
    for (const { send } of [roomy, tight]) {
      for (let round = 0; round < 2; round++) {
        for (const name of names) expect(await send(`https://${name}:${r.port}/`)).toMatchObject({ status: 200 });
        await r.idle();
      }
    }
    // Six names: first contacts are full handshakes; the second round resumes all six, unless only
    // three sessions fit, which the six names in turn push out before each comes back.
    expect(roomy.kinds).toEqual([...names.map(() => 'tls_full'), ...names.map(() => 'tls_resumed')]);
    expect(tight.kinds).toEqual(Array.from({ length: 12 }, () => 'tls_full'));
  });

  it("reuses a connection for as long as the receiver's Keep-Alive says, past undici's 4 s default", async () => {
    const r = await receiver(false, 10_000);
    closers.push(r.close);
    const { send, kinds } = sender();
    expect(await send(`http://127.0.0.1:${r.port}/`)).toMatchObject({ status: 200 });
    // Apart in time as low-rate deliveries are: longer than undici keeps a connection unasked,
    // within the `Keep-Alive: timeout=10` the receiver sent.
    await new Promise((resolve) => setTimeout(resolve, 4_500));
    expect(await send(`http://127.0.0.1:${r.port}/`)).toMatchObject({ status: 200 });
    expect(kinds).toEqual(['plain']);
  });

  it('fails a connection that does not finish its TLS handshake within the connect timeout, as a connect error', async () => {
    // A TCP listener that accepts and never answers the ClientHello.
    const accepted = new Set<Socket>();
    const silent = createTcpServer((socket) => {
      accepted.add(socket);
      socket.on('close', () => accepted.delete(socket));
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    closers.push(async () => {
      for (const socket of accepted) socket.destroy();
      await new Promise<void>((resolve) => silent.close(() => resolve()));
    });
    const { send, kinds } = sender({ connectTimeoutMs: 300 });
    const result = await send(`https://slow.${TEST_DOMAIN}:${(silent.address() as AddressInfo).port}/`);
    expect(result).toMatchObject({ kind: 'error', errorClass: 'connect' });
    expect(kinds).toEqual([]);
  });

  /** A DNS resolver (callback style, as dns.Resolver) answering A records from `answers`, counting its queries. */
  function resolverOf(answers: Record<string, { address: string; ttl: number }>) {
    const queries: string[] = [];
    const notFound = (hostname: string) =>
      Object.assign(new Error(`queryA ENOTFOUND ${hostname}`), { code: 'ENOTFOUND' });
    const resolver = {
      resolve4(hostname: string, _options: unknown, callback: (error: Error | null, records?: unknown) => void) {
        queries.push(hostname);
        const answer = answers[hostname];
        if (answer === undefined) callback(notFound(hostname));
        else callback(null, [answer]);
      },
      resolve6(hostname: string, _options: unknown, callback: (error: Error | null) => void) {
        callback(Object.assign(new Error(`queryAaaa ENODATA ${hostname}`), { code: 'ENODATA' }));
      },
    };
    return { resolver: resolver as unknown as dns.Resolver, queries };
  }

  it('asks DNS once per name for as long as its TTL, for every new connection meanwhile', async () => {
    const r = await receiver(false, 50);
    closers.push(r.close);
    const dnsServer = resolverOf({ [`ttl.${TEST_DOMAIN}`]: { address: '127.0.0.1', ttl: 2 } });
    const { send, kinds } = sender({ lookup: undefined, dnsResolver: dnsServer.resolver });
    const startedMs = Date.now();
    for (let i = 0; i < 3; i++) {
      expect(await send(`http://ttl.${TEST_DOMAIN}:${r.port}/`)).toMatchObject({ status: 200 });
      await r.idle();
    }
    expect(Date.now() - startedMs).toBeLessThan(2_000);
    expect(kinds).toEqual(['plain', 'plain', 'plain']);
    expect(dnsServer.queries).toEqual([`ttl.${TEST_DOMAIN}`]);
    // Once the TTL has passed, the name is asked again.
    await new Promise((resolve) => setTimeout(resolve, 2_000 - (Date.now() - startedMs) + 100));
    expect(await send(`http://ttl.${TEST_DOMAIN}:${r.port}/`)).toMatchObject({ status: 200 });
    expect(dnsServer.queries).toHaveLength(2);
  });

  it('checks a cached answer against the SSRF policy on every use, not only when it was fetched', async () => {
    const dnsServer = resolverOf({ [`inside.${TEST_DOMAIN}`]: { address: '10.1.2.3', ttl: 60 } });
    const { send, kinds } = sender({ allowPrivateTargets: false, lookup: undefined, dnsResolver: dnsServer.resolver });
    for (let i = 0; i < 2; i++) {
      expect(await send(`http://inside.${TEST_DOMAIN}/`)).toMatchObject({ kind: 'error', errorClass: 'ssrf_blocked' });
    }
    expect(dnsServer.queries).toEqual([`inside.${TEST_DOMAIN}`]);
    expect(kinds).toEqual([]);
  });
});
