import type { LookupAddress, LookupOptions, lookup as dnsLookup } from 'node:dns';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import {
  attemptErrorClass,
  guardedLookup,
  HttpSender,
  SsrfBlockedError,
  type HttpSenderOptions,
  type SendResult,
} from '../../src/delivery/outbound/http-sender.js';

const SIGNATURE = 'v1,c2lnbmF0dXJlLXRoYXQtbXVzdC1uZXZlci1iZS1sb2dnZWQ=';
const BODY = '{"version":"1.0","event_id":"e-1","event_type":"EVENT_TYPE_MACHINE_CREATED","data":{}}';

interface Seen {
  method: string | undefined;
  url: string | undefined;
  headers: http.IncomingHttpHeaders;
  body: string;
  remotePort: number | undefined;
}

interface Receiver {
  port: number;
  /** `http://127.0.0.1:<port>` (or the IPv6 form for a receiver on ::1). */
  origin: string;
  seen: Seen[];
}

type Handler = (req: http.IncomingMessage, res: http.ServerResponse) => void;

const servers: http.Server[] = [];
const senders: HttpSender[] = [];

afterEach(async () => {
  await Promise.all(senders.splice(0).map((sender) => sender.close()));
  await Promise.all(
    servers.splice(0).map(
      (server) =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    ),
  );
});

/** A real HTTP receiver on a loopback port; `handle` scripts its answer after the body has arrived. */
async function receiver(handle: Handler = (_, res) => res.end('ok'), host = '127.0.0.1'): Promise<Receiver> {
  const seen: Seen[] = [];
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (chunk: Buffer) => chunks.push(chunk));
    req.on('end', () => {
      seen.push({
        method: req.method,
        url: req.url,
        headers: req.headers,
        body: Buffer.concat(chunks).toString('utf8'),
        remotePort: req.socket.remotePort,
      });
      handle(req, res);
    });
  });
  servers.push(server);
  await new Promise<void>((resolve) => server.listen(0, host, resolve));
  const { port } = server.address() as AddressInfo;
  return { port, origin: host.includes(':') ? `http://[${host}]:${port}` : `http://${host}:${port}`, seen };
}

function sender(overrides: Partial<HttpSenderOptions> = {}): HttpSender {
  const created = new HttpSender({
    allowPrivateTargets: true,
    connectTimeoutMs: 2_000,
    maxResponseBytes: 64 * 1024,
    snippetBytes: 4 * 1024,
    userAgent: 'Hookline/test',
    ...overrides,
  });
  senders.push(created);
  return created;
}

function send(target: HttpSender, url: string, timeoutMs = 5_000): Promise<SendResult> {
  return target.send({
    url,
    headers: { 'webhook-id': 'e-1', 'webhook-signature': SIGNATURE, 'x-webhook-attempt': '1' },
    body: BODY,
    timeoutMs,
  });
}

function expectError(result: SendResult, errorClass: string): Extract<SendResult, { kind: 'error' }> {
  expect(result).toMatchObject({ kind: 'error', errorClass });
  if (result.kind !== 'error') throw new Error('unreachable');
  expect(result.message).not.toContain(SIGNATURE);
  return result;
}

/** A port nothing listens on: bound once, then closed. */
async function closedPort(): Promise<number> {
  const server = http.createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

describe('HttpSender: responses', () => {
  it('POSTs the body with the given headers, content-type and user-agent, and returns the response', async () => {
    const target = await receiver((_, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end('thanks'));
    const result = await send(sender(), `${target.origin}/hooks?x=1`);
    expect(result).toMatchObject({ kind: 'response', status: 200, retryAfter: undefined, bodySnippet: 'thanks' });
    expect(result.durationMs).toBeGreaterThanOrEqual(0);
    expect(target.seen).toHaveLength(1);
    const [hit] = target.seen;
    expect(hit).toMatchObject({ method: 'POST', url: '/hooks?x=1', body: BODY });
    expect(hit?.headers).toMatchObject({
      'content-type': 'application/json',
      'user-agent': 'Hookline/test',
      'webhook-id': 'e-1',
      'webhook-signature': SIGNATURE,
      'x-webhook-attempt': '1',
    });
  });

  it('keeps connections alive across attempts (one pooled agent)', async () => {
    const target = await receiver();
    const http1 = sender();
    for (let i = 0; i < 3; i++) {
      expect(await send(http1, `${target.origin}/`)).toMatchObject({ status: 200 });
      // undici returns the socket to the pool just after the body ends; back-to-back sends may open a second one.
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(new Set(target.seen.map((s) => s.remotePort)).size).toBe(1);
  });

  it('reads at most maxResponseBytes of a huge body, stops reading and returns promptly', async () => {
    const chunk = Buffer.alloc(64 * 1024, 'abcdefghijklmnopqrstuvwxyz');
    let closed: () => void = () => undefined;
    const receiverSawClose = new Promise<void>((resolve) => (closed = resolve));
    let finished = true;
    const target = await receiver((_, res) => {
      res.writeHead(200, { 'content-type': 'text/plain' });
      // 1 MiB, and then the response is never ended: only a reader that stops early returns.
      for (let i = 0; i < 16; i++) res.write(chunk);
      res.on('close', () => {
        finished = res.writableFinished;
        closed();
      });
    });
    const started = Date.now();
    const result = await send(sender(), `${target.origin}/`, 10_000);
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(result).toMatchObject({ kind: 'response', status: 200 });
    if (result.kind !== 'response') throw new Error('unreachable');
    expect(Buffer.byteLength(result.bodySnippet)).toBe(4 * 1024);
    expect(result.bodySnippet).toBe(chunk.subarray(0, 4 * 1024).toString('utf8'));
    // The sender dropped the connection instead of waiting for the rest.
    await receiverSawClose;
    expect(finished).toBe(false);
  });

  it('cuts the snippet between characters', async () => {
    const target = await receiver((_, res) => res.end('✓'.repeat(2_000)));
    const result = await send(sender(), `${target.origin}/`);
    if (result.kind !== 'response') throw new Error(`expected a response, got ${JSON.stringify(result)}`);
    // 1365 three-byte characters fill 4095 bytes; the 1366th would not fit.
    expect(result.bodySnippet).toBe('✓'.repeat(1_365));
  });

  it('does not follow a redirect: a 302 is just the response', async () => {
    const elsewhere = await receiver();
    const target = await receiver((_, res) => res.writeHead(302, { location: `${elsewhere.origin}/moved` }).end());
    const result = await send(sender(), `${target.origin}/`);
    expect(result).toMatchObject({ kind: 'response', status: 302 });
    expect(target.seen).toHaveLength(1);
    expect(elsewhere.seen).toHaveLength(0);
  });

  it('returns a 500 with its body as the snippet', async () => {
    const target = await receiver((_, res) => res.writeHead(500).end('database down'));
    expect(await send(sender(), `${target.origin}/`)).toMatchObject({
      kind: 'response',
      status: 500,
      bodySnippet: 'database down',
    });
  });

  it('exposes Retry-After on 429 and 503', async () => {
    const target = await receiver((req, res) =>
      req.url === '/busy'
        ? res.writeHead(429, { 'retry-after': '120' }).end('slow down')
        : res.writeHead(503, { 'retry-after': 'Thu, 02 Jan 2025 03:05:35 GMT' }).end(),
    );
    expect(await send(sender(), `${target.origin}/busy`)).toMatchObject({
      kind: 'response',
      status: 429,
      retryAfter: '120',
      bodySnippet: 'slow down',
    });
    expect(await send(sender(), `${target.origin}/down`)).toMatchObject({
      kind: 'response',
      status: 503,
      retryAfter: 'Thu, 02 Jan 2025 03:05:35 GMT',
    });
  });

  it('keeps a response whose body stalls after the status line, with what arrived', async () => {
    const target = await receiver((_, res) => {
      res.writeHead(200);
      res.write('partial');
    });
    const started = Date.now();
    const result = await send(sender(), `${target.origin}/`, 400);
    expect(Date.now() - started).toBeLessThan(400 + 500);
    expect(result).toMatchObject({ kind: 'response', status: 200, bodySnippet: 'partial' });
  });

  it.each([
    ['ended in the same write', true],
    ['never ended', false],
  ])('stops at maxResponseBytes in the middle of a chunk (%s) and keeps the status that arrived', async (_, ended) => {
    // One write carries the whole body, so the cap falls inside a chunk; if the response is never
    // ended, only a reader that stops at the cap returns before the deadline.
    const target = await receiver((_, res) => {
      res.writeHead(500, { connection: 'close', 'retry-after': '30' });
      if (ended) res.end('0123456789'.repeat(10));
      else res.write('0123456789'.repeat(10));
    });
    const started = Date.now();
    const result = await send(sender({ maxResponseBytes: 25 }), `${target.origin}/`, 3_000);
    expect(Date.now() - started).toBeLessThan(1_000);
    expect(result).toMatchObject({
      kind: 'response',
      status: 500,
      retryAfter: '30',
      bodySnippet: '0123456789012345678901234',
    });
  });

  it('keeps the connection when a response longer than maxResponseBytes ends within the same read', async () => {
    const target = await receiver((_, res) => res.writeHead(200, { 'content-length': 100 }).end('x'.repeat(100)));
    const capped = sender({ maxResponseBytes: 10 });
    for (let i = 0; i < 3; i++) {
      expect(await send(capped, `${target.origin}/`)).toMatchObject({ status: 200, bodySnippet: 'x'.repeat(10) });
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    expect(new Set(target.seen.map((s) => s.remotePort)).size).toBe(1);
  });

  it('keeps a response whose body breaks off after the status line, with what arrived', async () => {
    const target = await receiver((_, res) => {
      res.writeHead(200);
      res.write('partial');
      setTimeout(() => res.destroy(), 50);
    });
    const result = await send(sender(), `${target.origin}/`, 5_000);
    expect(result).toMatchObject({ kind: 'response', status: 200, bodySnippet: 'partial' });
    expect(result.durationMs).toBeLessThan(1_000);
  });

  it('ends the read at the attempt deadline while the body keeps trickling, with what arrived', async () => {
    const target = await receiver((_, res) => {
      res.writeHead(200);
      // A byte every 50 ms: undici's body timeout (between chunks) never fires, only the deadline can.
      const timer = setInterval(() => res.write('x'), 50);
      res.on('close', () => clearInterval(timer));
    });
    const started = Date.now();
    const result = await send(sender(), `${target.origin}/`, 400);
    const elapsedMs = Date.now() - started;
    expect(elapsedMs).toBeGreaterThanOrEqual(390);
    expect(elapsedMs).toBeLessThan(400 + 500);
    expect(result).toMatchObject({ kind: 'response', status: 200 });
    if (result.kind !== 'response') throw new Error('unreachable');
    expect(result.bodySnippet).toMatch(/^x{3,}$/);
  });

  it('skips informational 1xx answers: only a final status makes a response', async () => {
    const target = await receiver((req, res) => {
      res.writeEarlyHints({ link: '</style.css>; rel=preload' });
      setTimeout(
        () => (req.url === '/broken' ? res.destroy() : res.writeHead(202, { 'retry-after': '5' }).end('accepted')),
        20,
      );
    });
    expect(await send(sender(), `${target.origin}/final`)).toMatchObject({
      kind: 'response',
      status: 202,
      retryAfter: '5',
      bodySnippet: 'accepted',
    });
    expectError(await send(sender(), `${target.origin}/broken`), 'network');
  });

  it('takes the first of repeated Retry-After headers', async () => {
    const target = await receiver((_, res) => {
      res.setHeader('retry-after', ['7', '9']);
      res.writeHead(429).end();
    });
    expect(await send(sender(), `${target.origin}/`)).toMatchObject({ kind: 'response', status: 429, retryAfter: '7' });
  });
});

describe('HttpSender: errors', () => {
  it('times out a receiver that accepts the connection and never answers', async () => {
    const target = await receiver(() => undefined);
    const started = Date.now();
    const result = expectError(await send(sender(), `${target.origin}/`, 300), 'timeout');
    const elapsedMs = Date.now() - started;
    expect(elapsedMs).toBeGreaterThanOrEqual(290);
    expect(elapsedMs).toBeLessThan(300 + 500);
    expect(result.durationMs).toBeGreaterThanOrEqual(290);
    expect(result.message).toBe('no response within 300 ms');
    expect(target.seen).toHaveLength(1);
  });

  it('never sends an attempt whose deadline passed while it waited for a pooled connection', async () => {
    const target = await receiver((_, res) => setTimeout(() => res.end('slow'), 600));
    const oneConnection = sender({ connections: 1 });
    const [first, queued] = await Promise.all([
      send(oneConnection, `${target.origin}/`, 5_000),
      send(oneConnection, `${target.origin}/`, 200),
    ]);
    expect(first).toMatchObject({ kind: 'response', status: 200, bodySnippet: 'slow' });
    expect(expectError(queued, 'timeout').message).toBe('no response within 200 ms');
    expect(target.seen).toHaveLength(1);
  });

  it('classifies a refused connection as connect', async () => {
    const port = await closedPort();
    const result = expectError(await send(sender(), `http://127.0.0.1:${port}/`), 'connect');
    expect(result.message).toContain('ECONNREFUSED');
  });

  it('classifies an unresolvable name as dns, with and without the guard', async () => {
    for (const allowPrivateTargets of [true, false]) {
      const result = expectError(await send(sender({ allowPrivateTargets }), 'http://nonexistent.invalid/'), 'dns');
      expect(result.message).toMatch(/ENOTFOUND|EAI_AGAIN/);
    }
  });

  it('classifies TLS spoken to a plain-HTTP port as tls', async () => {
    const target = await receiver();
    const result = expectError(await send(sender(), `https://127.0.0.1:${target.port}/`), 'tls');
    expect(result.message).toMatch(/SSL|TLS/);
    expect(target.seen).toHaveLength(0);
  });

  it('refuses URLs it cannot send to without touching the network', async () => {
    expectError(await send(sender(), 'not a url'), 'network');
    expectError(await send(sender(), 'ftp://127.0.0.1/'), 'network');
  });
});

describe('HttpSender: SSRF guard', () => {
  it('blocks loopback, private, metadata and mapped addresses before any request reaches a receiver', async () => {
    const v4 = await receiver();
    const v6 = await receiver(undefined, '::1');
    const guarded = sender({ allowPrivateTargets: false });
    const urls = [
      `http://127.0.0.1:${v4.port}/`,
      `http://0x7f000001:${v4.port}/`,
      `http://2130706433:${v4.port}/`,
      `http://[::ffff:127.0.0.1]:${v4.port}/`,
      `http://localhost:${v4.port}/`,
      `http://[::1]:${v6.port}/`,
      'http://10.0.0.1/',
      'http://169.254.169.254/latest/meta-data/',
      'http://[fd00:ec2::254]/latest/meta-data/',
    ];
    for (const url of urls) {
      const started = Date.now();
      const result = expectError(await send(guarded, url), 'ssrf_blocked');
      expect(Date.now() - started, url).toBeLessThan(200);
      expect(result.message, url).toMatch(/blocked address/);
    }
    expect(v4.seen).toHaveLength(0);
    expect(v6.seen).toHaveLength(0);
  });

  it('names the reason, metadata included', async () => {
    const guarded = sender({ allowPrivateTargets: false });
    expect(expectError(await send(guarded, 'http://169.254.169.254/'), 'ssrf_blocked').message).toContain(
      'link-local (metadata)',
    );
    expect(expectError(await send(guarded, 'http://10.0.0.1/'), 'ssrf_blocked').message).toContain('(private)');
  });

  it('checks what a name resolves to, once, and never connects to a blocked answer', async () => {
    const target = await receiver();
    const asked: string[] = [];
    const lookup = ((
      hostname: string,
      _options: LookupOptions,
      callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
    ) => {
      asked.push(hostname);
      callback(null, [{ address: '127.0.0.1', family: 4 }]);
    }) as typeof dnsLookup;
    const result = expectError(
      await send(sender({ allowPrivateTargets: false, lookup }), `http://evil.example:${target.port}/`),
      'ssrf_blocked',
    );
    // The rule that blocked it, not the address: the attempt log is shown to vendors.
    expect(result.message).toBe('ERR_HOOKLINE_SSRF_BLOCKED: evil.example resolves to a blocked address (loopback)');
    expect(asked).toEqual(['evil.example']);
    expect(target.seen).toHaveLength(0);
  });

  it('lets the same loopback receiver be reached when private targets are allowed', async () => {
    const v4 = await receiver();
    const v6 = await receiver(undefined, '::1');
    const open = sender({ allowPrivateTargets: true });
    for (const url of [
      `http://127.0.0.1:${v4.port}/`,
      `http://0x7f000001:${v4.port}/`,
      `http://localhost:${v4.port}/`,
      `http://[::1]:${v6.port}/`,
    ]) {
      expect(await send(open, url), url).toMatchObject({ kind: 'response', status: 200 });
    }
    expect(v4.seen).toHaveLength(3);
    expect(v6.seen).toHaveLength(1);
  });

  it('uses an injected lookup when private targets are allowed, connecting to its answer', async () => {
    const target = await receiver();
    const lookup = ((_hostname: string, options: LookupOptions, callback: (...args: unknown[]) => void) => {
      if (options.all === true) callback(null, [{ address: '127.0.0.1', family: 4 }]);
      else callback(null, '127.0.0.1', 4);
    }) as unknown as typeof dnsLookup;
    expect(
      await send(sender({ allowPrivateTargets: true, lookup }), `http://hooks.test:${target.port}/x`),
    ).toMatchObject({ status: 200 });
    expect(target.seen[0]?.headers.host).toBe(`hooks.test:${target.port}`);
  });
});

describe('guardedLookup', () => {
  type Answer = { error: NodeJS.ErrnoException | null; address?: string | LookupAddress[]; family?: number };

  function resolveWith(answer: LookupAddress[] | NodeJS.ErrnoException) {
    return ((
      _hostname: string,
      options: LookupOptions,
      callback: (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
    ) => {
      expect(options.all).toBe(true);
      if (answer instanceof Error) callback(answer, []);
      else callback(null, answer);
    }) as typeof dnsLookup;
  }

  function run(answer: LookupAddress[] | NodeJS.ErrnoException, all: boolean): Promise<Answer> {
    return new Promise((resolve) =>
      guardedLookup(resolveWith(answer))('hooks.test', { all }, (error, address, family) =>
        resolve({ error, address, family }),
      ),
    );
  }

  it('blocks when ANY resolved address is blocked, even if another is public', async () => {
    const mixed = [
      { address: '93.184.215.14', family: 4 },
      { address: '10.1.2.3', family: 4 },
    ];
    for (const all of [true, false]) {
      const { error } = await run(mixed, all);
      expect(error).toBeInstanceOf(SsrfBlockedError);
      expect(error?.message).toBe('hooks.test resolves to a blocked address (private)');
    }
  });

  it('passes public answers on: all of them when asked for all, else the first', async () => {
    const publicAnswers = [
      { address: '2606:4700:4700::1111', family: 6 },
      { address: '1.1.1.1', family: 4 },
    ];
    expect(await run(publicAnswers, true)).toEqual({ error: null, address: publicAnswers, family: undefined });
    expect(await run(publicAnswers, false)).toEqual({ error: null, address: '2606:4700:4700::1111', family: 6 });
  });

  it('passes resolver errors through and treats an empty answer as not found', async () => {
    const notFound = Object.assign(new Error('getaddrinfo ENOTFOUND hooks.test'), { code: 'ENOTFOUND' });
    expect((await run(notFound, true)).error).toBe(notFound);
    expect((await run([], false)).error).toMatchObject({ code: 'ENOTFOUND' });
  });
});

describe('attemptErrorClass', () => {
  const coded = (code: string, message = code) => Object.assign(new Error(message), { code });

  it.each<[string, unknown, string]>([
    ['self-signed certificate', coded('DEPTH_ZERO_SELF_SIGNED_CERT'), 'tls'],
    ['self-signed in chain', coded('SELF_SIGNED_CERT_IN_CHAIN'), 'tls'],
    ['expired certificate', coded('CERT_HAS_EXPIRED'), 'tls'],
    ['unknown issuer', coded('UNABLE_TO_VERIFY_LEAF_SIGNATURE'), 'tls'],
    ['wrong host name', coded('ERR_TLS_CERT_ALTNAME_INVALID'), 'tls'],
    ['bad record', coded('ERR_SSL_WRONG_VERSION_NUMBER'), 'tls'],
    ['not found', coded('ENOTFOUND'), 'dns'],
    ['resolver busy', coded('EAI_AGAIN'), 'dns'],
    ['refused', coded('ECONNREFUSED'), 'connect'],
    ['reset', coded('ECONNRESET'), 'connect'],
    ['unreachable', coded('EHOSTUNREACH'), 'connect'],
    ['connect timeout', coded('UND_ERR_CONNECT_TIMEOUT'), 'connect'],
    ['headers timeout', coded('UND_ERR_HEADERS_TIMEOUT'), 'timeout'],
    ['body timeout', coded('UND_ERR_BODY_TIMEOUT'), 'timeout'],
    ['aborted', coded('UND_ERR_ABORTED'), 'timeout'],
    ['DOMException timeout', new DOMException('The operation was aborted due to timeout', 'TimeoutError'), 'timeout'],
    ['ssrf', new SsrfBlockedError('x'), 'ssrf_blocked'],
    ['ssrf as a cause', new Error('connect failed', { cause: new SsrfBlockedError('x') }), 'ssrf_blocked'],
    ['dns as a cause', new Error('fetch failed', { cause: coded('ENOTFOUND') }), 'dns'],
    ['every address refused', new AggregateError([coded('ECONNREFUSED'), coded('ECONNREFUSED')]), 'connect'],
    ['socket closed', coded('UND_ERR_SOCKET'), 'network'],
    ['plain error', new Error('boom'), 'network'],
    ['not an error', 'boom', 'network'],
  ])('%s → %s', (_, error, errorClass) => {
    expect(attemptErrorClass(error)).toBe(errorClass);
  });
});
