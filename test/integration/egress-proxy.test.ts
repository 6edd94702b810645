import type dns from 'node:dns';
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import net, { type AddressInfo, type LookupFunction } from 'node:net';
import tls, { type TLSSocket } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { parseEgressProxyUrl } from '../../src/config/egress-proxy-url.js';
import { connectThroughProxy, type EgressProxy } from '../../src/delivery/outbound/egress-proxy.js';
import { guardedLookup, SsrfBlockedError } from '../../src/delivery/outbound/http-sender.js';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { TEST_DOMAIN } from '../helpers/test-ca.js';
import { hasTinyproxy, startTinyproxy, type TestTinyproxy } from '../helpers/tinyproxy.js';
import { quiescent, waitFor } from '../helpers/wait.js';

const testCa = inject('testCa');
const RECEIVER = `receiver.${TEST_DOMAIN}`;

/** Whether tinyproxy runs here; in CI it must (.ci/run installs it), so a missing one fails there. */
function tinyproxyReady(): boolean {
  if (hasTinyproxy()) return true;
  if (process.env.CI) throw new Error('the egress proxy tests need tinyproxy in CI (apt-get install tinyproxy)');
  console.warn('skipping the egress proxy tests: tinyproxy is not installed (Debian: apt-get install tinyproxy)');
  return false;
}
const tinyproxyHere = tinyproxyReady();

/** The lookup a deployment's guard would answer for a public name: `*.hookline.test` → 127.0.0.1, names noted. */
function loopbackLookup(asked: string[] = []): LookupFunction {
  return (hostname, _options, callback) => {
    asked.push(hostname);
    callback(null, '127.0.0.1', 4);
  };
}

type Tunnel = { returned: net.Socket; result: Promise<net.Socket> };

/** connectThroughProxy as a promise; a second callback throws, which fails the run. */
function tunnel(proxy: EgressProxy, port: number, lookup?: LookupFunction, hostname = RECEIVER): Tunnel {
  let calls = 0;
  let returned: net.Socket | undefined;
  const result = new Promise<net.Socket>((resolve, reject) => {
    returned = connectThroughProxy({ proxy, hostname, port, ...(lookup ? { lookup } : {}) }, (error, socket) => {
      if (++calls > 1) throw new Error('connectThroughProxy called back more than once');
      if (error) reject(error);
      else resolve(socket!);
    });
  });
  return { returned: returned!, result };
}

/** The error a tunnel failed with. */
async function failure(t: Tunnel): Promise<Error & { code?: string; statusCode?: number }> {
  const outcome = await t.result.then(
    (socket) => socket.destroy(),
    (error: unknown) => error as Error,
  );
  if (!(outcome instanceof Error)) throw new Error('the tunnel opened where it should have failed');
  return outcome;
}

/** Writes `request` on a socket and answers everything read until the other side closes. */
function exchange(socket: net.Socket, request: string): Promise<string> {
  return new Promise((resolve, reject) => {
    let text = '';
    socket.setEncoding('utf8');
    socket.on('data', (chunk: string) => (text += chunk));
    socket.on('end', () => resolve(text));
    socket.on('error', reject);
    socket.write(request);
  });
}

/** A receiver on 127.0.0.1 (plain or with the test CA's certificate) noting each request's Host, body and SNI. */
async function receiver(secure: boolean) {
  const seen: { host: string | undefined; body: string; servername: string | undefined }[] = [];
  const handler = (request: IncomingMessage, response: ServerResponse) => {
    let body = '';
    request.setEncoding('utf8');
    request.on('data', (chunk: string) => (body += chunk));
    request.on('end', () => {
      // A TLS socket's servername is the SNI it received; a plain socket has none.
      const servername = (request.socket as Partial<TLSSocket>).servername || undefined;
      seen.push({ host: request.headers.host, body, servername });
      response.end('received');
    });
  };
  const server = secure
    ? createHttpsServer({ cert: testCa!.cert, key: testCa!.key }, handler)
    : createHttpServer(handler);
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    port: (server.address() as AddressInfo).port,
    seen,
    close: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** A raw POST as the engine sends one: the Host header carries the receiver's name, never the address. */
const post = (port: number, body: string) =>
  `POST / HTTP/1.1\r\nHost: ${RECEIVER}:${port}\r\nContent-Type: application/json\r\n` +
  `Content-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;

/** tinyproxy's log lines for new clients and for CONNECT requests, after `from` characters. */
const clientsIn = (log: string) => log.match(/Connect \(file descriptor \d+\): /g)?.length ?? 0;
const connectsIn = (log: string) =>
  [...log.matchAll(/Request \(file descriptor \d+\): CONNECT (\S+) HTTP/g)].map((m) => m[1]);

describe.skipIf(!tinyproxyHere)('tunnels through a real tinyproxy', () => {
  let proxy: TestTinyproxy;
  const closers: (() => Promise<void>)[] = [];
  beforeAll(async () => {
    proxy = await startTinyproxy();
  });
  afterAll(async () => proxy?.stop());
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  it('carries an HTTP request to the receiver, with the Host header naming the receiver', async () => {
    const r = await receiver(false);
    closers.push(r.close);
    const t = tunnel(parseEgressProxyUrl(proxy.url), r.port, loopbackLookup());
    const socket = await t.result;
    expect(socket).toBe(t.returned);
    const response = await exchange(socket, post(r.port, '{"event":"machine.created"}'));
    expect(response).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(response.endsWith('\r\n\r\nreceived')).toBe(true);
    expect(r.seen).toEqual([
      { host: `${RECEIVER}:${r.port}`, body: '{"event":"machine.created"}', servername: undefined },
    ]);
  });

  it.skipIf(testCa === undefined)('carries TLS to the receiver, with SNI and Host naming the receiver', async () => {
    const r = await receiver(true);
    closers.push(r.close);
    const socket = await tunnel(parseEgressProxyUrl(proxy.url), r.port, loopbackLookup()).result;
    const secure = tls.connect({ socket, servername: RECEIVER, ca: readFileSync(testCa!.caPath, 'utf8') });
    await new Promise<void>((resolve, reject) => secure.once('secureConnect', resolve).once('error', reject));
    expect(secure.authorized).toBe(true);
    const response = await exchange(secure, post(r.port, '{"tls":true}'));
    expect(response).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(response.endsWith('\r\n\r\nreceived')).toBe(true);
    expect(r.seen).toEqual([{ host: `${RECEIVER}:${r.port}`, body: '{"tls":true}', servername: RECEIVER }]);
  });

  it('asks the proxy to CONNECT to the address the lookup checked, never to the name', async () => {
    const r = await receiver(false);
    closers.push(r.close);
    const before = proxy.log().length;
    const asked: string[] = [];
    const socket = await tunnel(parseEgressProxyUrl(proxy.url), r.port, loopbackLookup(asked)).result;
    await exchange(socket, post(r.port, '{}'));
    const log = await waitFor(
      () => {
        const text = proxy.log().slice(before);
        return connectsIn(text).length > 0 && text;
      },
      5_000,
      'tinyproxy to log the CONNECT',
    );
    expect(asked).toEqual([RECEIVER]);
    expect(connectsIn(log)).toEqual([`127.0.0.1:${r.port}`]);
    expect(log).not.toContain(TEST_DOMAIN);
  });

  it('passes the guard’s refusal through unchanged, and the proxy never hears of it', async () => {
    // The engine's own guard, over a resolver that answers a loopback address (blocked) after a
    // while, as DNS does: a connection opened before the answer would have time to reach the proxy.
    const produced: unknown[] = [];
    const resolve = ((_hostname: string, _options: unknown, callback: (...args: unknown[]) => void) =>
      setTimeout(callback, 50, null, [{ address: '127.0.0.1', family: 4 }])) as unknown as typeof dns.lookup;
    const guarded = guardedLookup(resolve);
    const lookup: LookupFunction = (hostname, options, callback) =>
      guarded(hostname, options, (error, ...rest) => {
        produced.push(error);
        callback(error, ...rest);
      });
    const clientsBefore = clientsIn(proxy.log());

    const t = tunnel(parseEgressProxyUrl(proxy.url), 443, lookup);
    const error = await failure(t);
    expect(error).toBeInstanceOf(SsrfBlockedError);
    expect(error.code).toBe('ERR_HOOKLINE_SSRF_BLOCKED');
    expect(produced).toEqual([error]);
    expect(produced[0]).toBe(error);
    expect(t.returned.destroyed).toBe(true);
    const log = await quiescent(() => proxy.log(), 300, 5_000, 'tinyproxy log');
    expect(clientsIn(log)).toBe(clientsBefore);

    // The same count does see a tunnel that is let through, so its silence above means something.
    const r = await receiver(false);
    closers.push(r.close);
    (await tunnel(parseEgressProxyUrl(proxy.url), r.port, loopbackLookup()).result).destroy();
    await waitFor(() => clientsIn(proxy.log()) === clientsBefore + 1, 5_000, 'tinyproxy to log the allowed client');
  });

  it('reports the proxy’s status when the target refuses the connection', async () => {
    const closedPort = await freeLoopbackPort();
    const error = await failure(tunnel(parseEgressProxyUrl(proxy.url), closedPort, loopbackLookup()));
    expect(error.code).toBe('ERR_HOOKLINE_PROXY_CONNECT');
    // tinyproxy 1.11 answers `500 Unable to connect`.
    expect(error.statusCode).toBeGreaterThanOrEqual(500);
    expect(error.message).toBe(
      `egress proxy refused CONNECT to 127.0.0.1:${closedPort}: ${error.statusCode} Unable to connect`,
    );
  });

  it('tunnels to an IP literal without a lookup', async () => {
    const r = await receiver(false);
    closers.push(r.close);
    const asked: string[] = [];
    const socket = await tunnel(parseEgressProxyUrl(proxy.url), r.port, loopbackLookup(asked), '127.0.0.1').result;
    expect(await exchange(socket, post(r.port, '{}'))).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
    expect(asked).toEqual([]);
  });
});

describe.skipIf(!tinyproxyHere)('a real tinyproxy that wants credentials', () => {
  const PASSWORD = 'Proxy-pass.7';
  let proxy: TestTinyproxy;
  let r: Awaited<ReturnType<typeof receiver>>;
  beforeAll(async () => {
    proxy = await startTinyproxy({ basicAuth: { user: 'hookline', password: PASSWORD } });
    r = await receiver(false);
  });
  afterAll(async () => {
    await r?.close();
    await proxy?.stop();
  });
  const withUserinfo = (userinfo: string) => parseEgressProxyUrl(proxy.url.replace('http://', `http://${userinfo}@`));

  it('opens the tunnel with the right credentials, percent-decoded from the URL', async () => {
    // %2D is '-': the URL's encoding is undone before the credentials are sent.
    const socket = await tunnel(withUserinfo('hookline:Proxy%2Dpass.7'), r.port, loopbackLookup()).result;
    expect(await exchange(socket, post(r.port, '{}'))).toMatch(/^HTTP\/1\.1 200 OK\r\n/);
  });

  it.each([
    ['wrong credentials', 'hookline:Wrong-pass.7'],
    ['no credentials', undefined],
  ])('refuses %s with the proxy’s status, quoting no credentials', async (_what, userinfo) => {
    const settings = userinfo === undefined ? parseEgressProxyUrl(proxy.url) : withUserinfo(userinfo);
    const error = await failure(tunnel(settings, r.port, loopbackLookup()));
    expect(error.code).toBe('ERR_HOOKLINE_PROXY_CONNECT');
    // tinyproxy 1.11 answers 407 without credentials and, oddly, 401 with wrong ones.
    expect([401, 407]).toContain(error.statusCode);
    expect(error.message).toMatch(new RegExp(`^egress proxy refused CONNECT to 127\\.0\\.0\\.1:${r.port}: 40[17] `));
    for (const secret of ['Wrong-pass', PASSWORD, settings.authorization ?? 'Basic'])
      expect(error.message).not.toContain(secret);
  });
});

describe('a proxy that does not open the tunnel properly', () => {
  const closers: (() => Promise<void>)[] = [];
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
  });

  /** A TCP server on 127.0.0.1 that plays the proxy: `onConnect` answers each client. */
  async function fakeProxy(onConnect: (socket: net.Socket) => void): Promise<EgressProxy> {
    const server = net.createServer(onConnect);
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
    closers.push(() => new Promise<void>((resolve) => server.close(() => resolve())));
    return { host: '127.0.0.1', port: (server.address() as AddressInfo).port };
  }

  it('fails as the proxy being unreachable when nothing listens at its address: the message without it, the address and ECONNREFUSED apart', async () => {
    const proxy = { host: '127.0.0.1', port: await freeLoopbackPort() };
    const t = tunnel(proxy, 443, loopbackLookup());
    const error = (await failure(t)) as Error & { code?: string; address?: string; reason?: string };
    expect(error).toMatchObject({
      code: 'ERR_HOOKLINE_PROXY_UNREACHABLE',
      message: "the installation's egress proxy is unreachable (ECONNREFUSED)",
      address: `127.0.0.1:${proxy.port}`,
    });
    expect(error.reason).toContain('ECONNREFUSED');
    expect(t.returned.destroyed).toBe(true);
  });

  it('fails once when the proxy closes before answering', async () => {
    const proxy = await fakeProxy((socket) => socket.once('data', () => socket.end()));
    const error = await failure(tunnel(proxy, 443, loopbackLookup()));
    expect(error.code).toBe('ERR_HOOKLINE_PROXY_CONNECT');
    expect(error.statusCode).toBeUndefined();
    expect(error.message).toBe('egress proxy closed the connection before answering CONNECT');
  });

  it('gives up on an answer head longer than 16 KiB', async () => {
    const proxy = await fakeProxy((socket) =>
      socket.once('data', () => socket.write(`HTTP/1.1 200 OK\r\nX-Padding: ${'x'.repeat(17 * 1024)}`)),
    );
    const error = await failure(tunnel(proxy, 443, loopbackLookup()));
    expect(error.code).toBe('ERR_HOOKLINE_PROXY_CONNECT');
    expect(error.message).toBe('egress proxy sent an oversized answer to CONNECT');
  });

  it('hands bytes that follow the answer’s head to the caller', async () => {
    let request = '';
    const proxy = await fakeProxy((socket) =>
      socket.once('data', (chunk: Buffer) => {
        request = chunk.toString('latin1');
        socket.end('HTTP/1.1 200 Connection established\r\n\r\nfirst bytes of the tunnel');
      }),
    );
    const socket = await tunnel({ ...proxy, authorization: 'Basic aG9va2xpbmU6' }, 8443, loopbackLookup()).result;
    expect(await exchange(socket, '')).toBe('first bytes of the tunnel');
    expect(request).toBe(
      'CONNECT 127.0.0.1:8443 HTTP/1.1\r\nHost: 127.0.0.1:8443\r\nProxy-Authorization: Basic aG9va2xpbmU6\r\n\r\n',
    );
  });

  it('brackets an IPv6 address in the CONNECT target', async () => {
    let request = '';
    const proxy = await fakeProxy((socket) =>
      socket.once('data', (chunk: Buffer) => {
        request = chunk.toString('latin1');
        socket.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      }),
    );
    const v6: LookupFunction = (_hostname, _options, callback) => callback(null, '2001:db8::7', 6);
    const error = await failure(tunnel(proxy, 443, v6));
    expect(request).toBe('CONNECT [2001:db8::7]:443 HTTP/1.1\r\nHost: [2001:db8::7]:443\r\n\r\n');
    expect(error.statusCode).toBe(403);
    expect(error.message).toBe('egress proxy refused CONNECT to [2001:db8::7]:443: 403 Forbidden');
  });

  it('calls back once, and never connects, when the caller destroys the socket while the name resolves', async () => {
    let clients = 0;
    const proxy = await fakeProxy(() => clients++);
    let answer: (() => void) | undefined;
    const slow: LookupFunction = (_hostname, _options, callback) => (answer = () => callback(null, '127.0.0.1', 4));
    const t = tunnel(proxy, 443, slow);
    await waitFor(() => answer !== undefined, 5_000, 'the lookup to start');
    t.returned.destroy();
    expect((await failure(t)).message).toBe('egress proxy closed the connection before answering CONNECT');
    answer!();
    await quiescent(() => clients, 200, 5_000, 'proxy clients');
    expect(clients).toBe(0);
  });
});
