import type dns from 'node:dns';
import CacheableLookup from 'cacheable-lookup';
import type { LookupAddress, LookupOptions } from 'node:dns';
import type { LookupFunction } from 'node:net';
import { Agent, type Dispatcher } from 'undici';
import type { AttemptErrorClass } from '../../domain/delivery.js';
import { blockedAddressReason, parseIpLiteralHost } from '../../domain/ip-policy.js';
import { raceTimer } from '../../lib/timer-race.js';
import { LruMap } from '../../lib/lru-map.js';
import { ProxyUnreachableError, type EgressProxy } from './egress-proxy.js';
import { createConnector, type ConnectionKind, type ConnectorOptions } from './connector.js';

export interface SendRequest {
  url: string;
  headers: Record<string, string>;
  /** The body as sent: its text, or its UTF-8 bytes (encoded once for signing and sending). */
  body: string | Buffer;
  /** The whole attempt: connecting, sending and reading the response. */
  timeoutMs: number;
  /** mTLS: the certificate to present, and its key; connections are kept apart per certificate. */
  clientCertificate?: { fingerprint: string; certPem: string; keyPem: string };
  /** Response bytes kept as `bodySnippet`, at most `maxResponseBytes`; default the sender's snippetBytes. */
  keepBytes?: number;
}

export type SendResult =
  | { kind: 'response'; status: number; retryAfter: string | undefined; bodySnippet: string; durationMs: number }
  | { kind: 'error'; errorClass: AttemptErrorClass; message: string; durationMs: number };

export interface HttpSenderOptions {
  /** Lifts the SSRF guard (development and tests only). */
  allowPrivateTargets: boolean;
  connectTimeoutMs: number;
  /** Response bytes read at most (64 KiB by default in the config); the rest is never read. */
  maxResponseBytes: number;
  /** Response bytes kept as the snippet (4 KiB). */
  snippetBytes: number;
  userAgent: string;
  /** Connections per origin; default 50. */
  connections?: number;
  /**
   * Name resolution; default: DNS answers kept for their TTL (at most 5 minutes), names DNS does
   * not answer (`/etc/hosts`) through `dns.lookup`. Tests inject answers here.
   */
  lookup?: typeof dns.lookup;
  /** The DNS resolver behind the default (tests answer with TTLs of their own); default the system's servers. */
  dnsResolver?: dns.Resolver;
  /** TLS sessions kept for resumption (one per server name and port, LRU); default 10,000. */
  tlsSessions?: number;
  /** Told of every new connection to a receiver (metrics). */
  onConnected?: (kind: ConnectionKind) => void;
  /** CA certificates (PEM) trusted besides Node's (tests; deployments set NODE_EXTRA_CA_CERTS). */
  extraCa?: string;
  /** Every connection through this HTTP proxy (CONNECT to the address the lookup checked); default direct. */
  egressProxy?: EgressProxy;
  /**
   * Told when an attempt failed because the egress proxy itself could not be reached, with its
   * address and the socket's error: the operator's to see (the attempt's message, which vendors
   * read, names neither).
   */
  onEgressProxyUnreachable?: (failure: { proxy: string; reason: string }) => void;
}

/** At ~1–2 KB a session, at most ~20 MB: room for every endpoint a large installation delivers to. */
const DEFAULT_TLS_SESSIONS = 10_000;
/** Connection pools kept for client certificates at most; the least recently used is closed past it. */
const CLIENT_CERTIFICATE_POOLS = 1_000;

/** Raised inside connect when a name resolves to a blocked address; classified as `ssrf_blocked`. */
export class SsrfBlockedError extends Error {
  override name = 'SsrfBlockedError';
  readonly code = 'ERR_HOOKLINE_SSRF_BLOCKED';
}

/** The attempt's own deadline, the reason its dispatch is aborted with. */
class AttemptTimeoutError extends Error {
  override name = 'AttemptTimeoutError';
  readonly code = 'ERR_HOOKLINE_ATTEMPT_TIMEOUT';
}

/** Why a response read stops once `maxResponseBytes` have arrived; it never reaches a result. */
class ResponseCapReachedError extends Error {
  override name = 'ResponseCapReachedError';
  readonly code = 'ERR_HOOKLINE_RESPONSE_CAP_REACHED';
}

const MESSAGE_MAX_CHARS = 500;

/**
 * POSTs webhook deliveries over one pooled keep-alive undici Agent. Never follows redirects, bounds
 * every attempt by its timeout and the response read by `maxResponseBytes`, and (unless private
 * targets are allowed) refuses to connect to blocked addresses: IP-literal hosts are checked before
 * anything touches the network, names through a lookup that checks every resolved address and pins
 * the socket to the checked one. Every outcome is a value; `send` never throws.
 */
export class HttpSender {
  readonly #options: HttpSenderOptions;
  readonly #agent: Agent;
  /** What every pool's connector shares: the checked lookup and the TLS sessions. */
  readonly #connectorBase: ConnectorOptions;
  /**
   * A pool per client certificate (by fingerprint), beside the pool of requests without one: a
   * connection that presented one vendor's certificate must never carry another's request.
   */
  readonly #certificatePools = new LruMap<string, Agent>(CLIENT_CERTIFICATE_POOLS, (_fingerprint, agent) => {
    void agent.close();
  });

  constructor(options: HttpSenderOptions) {
    this.#options = options;
    // The SSRF guard checks every answer as it is used, a cached one as much as a fresh one.
    const resolve = options.lookup ?? cachedDnsLookup(options.dnsResolver);
    const lookup = options.allowPrivateTargets ? resolve : guardedLookup(resolve);
    const tlsSessions = options.tlsSessions ?? DEFAULT_TLS_SESSIONS;
    this.#connectorBase = {
      connectTimeoutMs: options.connectTimeoutMs,
      tlsSessions,
      sessions: new LruMap<string, Buffer>(tlsSessions),
      ...(lookup === undefined ? {} : { lookup }),
      ...(options.onConnected === undefined ? {} : { onConnected: options.onConnected }),
      ...(options.extraCa === undefined ? {} : { extraCa: options.extraCa }),
      ...(options.egressProxy === undefined ? {} : { proxy: options.egressProxy }),
    };
    this.#agent = this.#newAgent(this.#connectorBase);
  }

  #newAgent(connector: ConnectorOptions): Agent {
    return new Agent({ connections: this.#options.connections ?? 50, connect: createConnector(connector) });
  }

  /** The pool for a request: the shared one, or its client certificate's. */
  #dispatcherFor(request: SendRequest): Agent {
    const certificate = request.clientCertificate;
    if (certificate === undefined) return this.#agent;
    let agent = this.#certificatePools.get(certificate.fingerprint);
    if (agent === undefined) {
      agent = this.#newAgent({
        ...this.#connectorBase,
        sessionScope: `${certificate.fingerprint}|`,
        clientCertificate: { certPem: certificate.certPem, keyPem: certificate.keyPem },
      });
      this.#certificatePools.set(certificate.fingerprint, agent);
    }
    return agent;
  }

  /** The user-agent header every request carries. */
  get userAgent(): string {
    return this.#options.userAgent;
  }

  /** One delivery attempt: a response of any status, or the class of error that prevented one. */
  async send(request: SendRequest): Promise<SendResult> {
    const started = performance.now();

    // 1. Refuse what must never reach the network: unparsable URLs and blocked IP literals.
    let url: URL;
    try {
      url = new URL(request.url);
    } catch {
      return failure(request, started, 'network', 'the callback URL is not a valid absolute URL');
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      return failure(request, started, 'network', `the callback URL scheme ${url.protocol} is not http or https`);
    }
    if (!this.#options.allowPrivateTargets) {
      const literal = parseIpLiteralHost(url.hostname);
      const reason = literal === undefined ? undefined : blockedAddressReason(literal);
      if (reason !== undefined)
        return failure(request, started, 'ssrf_blocked', `${url.hostname} is a blocked address (${reason})`);
    }

    // 2. Send on the dispatcher's handler API: no Readable, no AbortSignal, one timer per attempt.
    //    A 3xx comes back as a response like any other: no redirect is followed.
    return new Promise<SendResult>((resolve) => {
      const attempt = new Attempt(this.#options, request, started, resolve);
      try {
        this.#dispatcherFor(request).dispatch(
          {
            origin: url.origin,
            path: url.search ? `${url.pathname}${url.search}` : url.pathname,
            method: 'POST',
            // Receivers get JSON; a token request sets its own form content type. The order is the one
            // the delivery log shows (request-headers.ts).
            headers: {
              ...request.headers,
              'content-type': request.headers['content-type'] ?? 'application/json',
              'user-agent': this.#options.userAgent,
            },
            body: request.body,
            // The attempt's deadline decides; undici's own timeouts back it up.
            headersTimeout: request.timeoutMs,
            bodyTimeout: request.timeoutMs,
          },
          attempt,
        );
      } catch (error) {
        // dispatch reports its own failures to the handler; this only guards the promise.
        attempt.onResponseError(undefined, error);
      }
    });
  }

  /** Closes the pooled connections once in-flight attempts have finished. */
  /**
   * Closes the connection pool once requests in flight have ended; after `graceMs` (when given)
   * they are aborted instead, so a hanging receiver cannot hold a shutdown.
   */
  async close(graceMs?: number): Promise<void> {
    const agents = [this.#agent, ...this.#certificatePools.values()];
    const closing = Promise.all(agents.map((agent) => agent.close())).then(() => undefined);
    if (graceMs === undefined) return closing;
    const late = await raceTimer(
      closing.then(() => false),
      graceMs,
      true,
    );
    if (late) await Promise.all(agents.map((agent) => agent.destroy()));
  }
}

/**
 * One attempt's undici handler. It settles exactly once: with the response as soon as the body
 * ends, breaks, stalls past the deadline or reaches `maxResponseBytes`, or with the class of the
 * error that came before any status. The deadline covers connecting too, but undici hands out the
 * abort controller only once the request is written to a socket, so a deadline that passes while
 * connecting or queued takes effect then (or when the connection fails), as with an AbortSignal.
 */
class Attempt implements Dispatcher.DispatchHandler {
  readonly #options: HttpSenderOptions;
  readonly #request: SendRequest;
  readonly #started: number;
  readonly #resolve: (result: SendResult) => void;
  readonly #maxResponseBytes: number;
  readonly #snippetBytes: number;
  /** `utf8Prefix(bytes, n)` depends on the first n + 1 bytes only, so no more are kept. */
  readonly #keepBytes: number;
  readonly #deadline: NodeJS.Timeout;
  #controller: Dispatcher.DispatchController | undefined = undefined;
  #timedOut = false;
  #settled = false;
  /** The final status; 0 until one has arrived. */
  #status = 0;
  #retryAfter: string | undefined = undefined;
  #chunks: Buffer[] = [];
  #keptBytes = 0;
  #receivedBytes = 0;

  constructor(
    options: HttpSenderOptions,
    request: SendRequest,
    started: number,
    resolve: (result: SendResult) => void,
  ) {
    this.#options = options;
    this.#request = request;
    this.#started = started;
    this.#resolve = resolve;
    this.#maxResponseBytes = options.maxResponseBytes;
    this.#snippetBytes = Math.min(options.maxResponseBytes, request.keepBytes ?? options.snippetBytes);
    this.#keepBytes = Math.min(options.maxResponseBytes, this.#snippetBytes + 1);
    this.#deadline = setTimeout(onDeadline, request.timeoutMs, this);
  }

  onRequestStart(controller: Dispatcher.DispatchController): void {
    this.#controller = controller;
    if (this.#timedOut) this.#abortForTimeout();
  }

  onResponseStart(
    _controller: Dispatcher.DispatchController,
    statusCode: number,
    headers: Record<string, string | string[] | undefined>,
  ): void {
    // 1xx informational answers precede the real one.
    if (statusCode < 200) return;
    this.#status = statusCode;
    const retryAfter = headers['retry-after'];
    this.#retryAfter = Array.isArray(retryAfter) ? retryAfter[0] : retryAfter;
  }

  onResponseData(controller: Dispatcher.DispatchController, chunk: Buffer): void {
    if (this.#settled) return;
    const room = this.#keepBytes - this.#keptBytes;
    if (room > 0) {
      this.#chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
      this.#keptBytes += Math.min(chunk.length, room);
    }
    this.#receivedBytes += chunk.length;
    if (this.#receivedBytes < this.#maxResponseBytes) return;
    // Enough read: answer with the status that arrived, then drop the connection rather than read
    // the rest. The abort waits until undici has parsed this read, so a response that ends within it
    // completes (the abort is then a no-op) and its connection stays in the pool.
    this.#settleResponse();
    queueMicrotask(() =>
      controller.abort(new ResponseCapReachedError(`read ${this.#maxResponseBytes} response bytes`)),
    );
  }

  onResponseEnd(): void {
    this.#settleResponse();
  }

  onResponseError(_controller: Dispatcher.DispatchController | undefined, error: unknown): void {
    // The status arrived in time, so a body that stalls or breaks leaves a response with a shorter
    // snippet, not a failed attempt.
    if (this.#status !== 0) return this.#settleResponse();
    if (this.#timedOut)
      return this.#settle(
        failure(this.#request, this.#started, 'timeout', `no response within ${this.#request.timeoutMs} ms`),
      );
    const unreachable = errorChain(error).find((item) => item instanceof ProxyUnreachableError);
    if (unreachable !== undefined)
      this.#options.onEgressProxyUnreachable?.({ proxy: unreachable.address, reason: unreachable.reason });
    this.#settle(failure(this.#request, this.#started, attemptErrorClass(error), describe(error)));
  }

  /** The attempt's deadline has passed: abort now, or as soon as undici hands out the controller. */
  onDeadline(): void {
    this.#timedOut = true;
    if (this.#controller !== undefined) this.#abortForTimeout();
  }

  #abortForTimeout(): void {
    this.#controller?.abort(new AttemptTimeoutError(`no response within ${this.#request.timeoutMs} ms`));
  }

  #settleResponse(): void {
    if (this.#settled) return;
    // Most bodies arrive in one chunk, which needs no copy.
    const bytes = this.#chunks.length === 1 ? (this.#chunks[0] as Buffer) : Buffer.concat(this.#chunks);
    this.#settle({
      kind: 'response',
      status: this.#status,
      retryAfter: this.#retryAfter,
      bodySnippet: utf8Prefix(bytes, this.#snippetBytes),
      durationMs: Math.round(performance.now() - this.#started),
    });
  }

  #settle(result: SendResult): void {
    if (this.#settled) return;
    this.#settled = true;
    clearTimeout(this.#deadline);
    this.#resolve(result);
  }
}

/** The timer callback; taking the attempt as an argument spares a closure per attempt. */
function onDeadline(attempt: Attempt): void {
  attempt.onDeadline();
}

/** A failed attempt as a value, its message redacted. */
function failure(request: SendRequest, started: number, errorClass: AttemptErrorClass, message: string): SendResult {
  return {
    kind: 'error',
    errorClass,
    message: redact(message, request.headers),
    durationMs: Math.round(performance.now() - started),
  };
}

/** The longest a DNS answer is kept, whatever its TTL: a receiver that moves is found within this. */
const DNS_MAX_TTL_S = 300;

/**
 * dns.lookup with the answers kept for their TTL: one query per receiver name per TTL instead of
 * one per new connection (dns.lookup runs getaddrinfo on libuv's 4 threads, where a slow resolver
 * would queue every connection behind it). Answers come from the DNS servers with their TTLs
 * (A and AAAA); a name they do not know is resolved by dns.lookup instead, uncached.
 */
function cachedDnsLookup(resolver: dns.Resolver | undefined): typeof dns.lookup {
  const cache = new CacheableLookup({ maxTtl: DNS_MAX_TTL_S, ...(resolver === undefined ? {} : { resolver }) });
  return cache.lookup.bind(cache) as unknown as typeof dns.lookup;
}

/**
 * Wraps a resolver so a name that resolves to ANY blocked address is refused, even when others are
 * public: a rebinding name that mixes a public and a private answer must not get a second chance
 * when the socket falls back to the next address. The socket connects to the addresses checked
 * here, so there is no second resolution between the check and the connection.
 */
export function guardedLookup(resolve: typeof dns.lookup): LookupFunction {
  return (hostname: string, options: LookupOptions, callback) => {
    resolve(hostname, { ...options, all: true }, (error: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => {
      if (error) return callback(error, '');
      for (const { address } of addresses) {
        const reason = blockedAddressReason(address);
        if (reason !== undefined) {
          // The rule, never the address: vendors read this message, and the address would map the internal network.
          return callback(new SsrfBlockedError(`${hostname} resolves to a blocked address (${reason})`), '');
        }
      }
      const [first] = addresses;
      if (first === undefined) {
        return callback(Object.assign(new Error(`${hostname} resolves to no address`), { code: 'ENOTFOUND' }), '');
      }
      // net asks for every address when it races IPv4 and IPv6 (autoSelectFamily), else for one.
      if (options.all === true) callback(null, addresses);
      else callback(null, first.address, first.family);
    });
  };
}

const TIMEOUT_CODES = new Set([
  'UND_ERR_HEADERS_TIMEOUT',
  'UND_ERR_BODY_TIMEOUT',
  'UND_ERR_ABORTED',
  'ABORT_ERR',
  'ERR_HOOKLINE_ATTEMPT_TIMEOUT',
]);
const DNS_CODES = new Set(['ENOTFOUND', 'EAI_AGAIN', 'EAI_FAIL', 'EAI_NONAME', 'EAI_NODATA', 'ENODATA']);
const CONNECT_CODES = new Set([
  'ECONNREFUSED',
  'ECONNRESET',
  'EHOSTUNREACH',
  'ENETUNREACH',
  'EHOSTDOWN',
  'ENETDOWN',
  'EADDRNOTAVAIL',
  'ETIMEDOUT',
  'UND_ERR_CONNECT_TIMEOUT',
  // The egress proxy did not open the tunnel (refused, or could not reach the receiver).
  'ERR_HOOKLINE_PROXY_CONNECT',
  // The egress proxy itself could not be reached (its socket's error is kept apart: see egress-proxy.ts).
  'ERR_HOOKLINE_PROXY_UNREACHABLE',
]);
const TLS_CODE =
  /^(ERR_TLS_|ERR_SSL_|ERR_OSSL_|CERT_|UNABLE_TO_|DEPTH_ZERO_SELF_SIGNED_CERT|SELF_SIGNED_CERT_IN_CHAIN|HOSTNAME_MISMATCH|EPROTO)/;

/**
 * The class of a failed attempt's error, judged over the error, its causes and, for an
 * AggregateError (several addresses tried), the errors inside. SSRF wins, then timeout, TLS, DNS, connect.
 */
export function attemptErrorClass(error: unknown): AttemptErrorClass {
  const found = new Set<AttemptErrorClass>();
  for (const item of errorChain(error)) {
    if (item instanceof SsrfBlockedError) found.add('ssrf_blocked');
    const code = (item as { code?: unknown }).code;
    const name = (item as { name?: unknown }).name;
    if (name === 'TimeoutError' || name === 'AbortError') found.add('timeout');
    if (typeof code !== 'string') continue;
    if (code === 'ERR_HOOKLINE_SSRF_BLOCKED') found.add('ssrf_blocked');
    else if (TIMEOUT_CODES.has(code)) found.add('timeout');
    else if (TLS_CODE.test(code)) found.add('tls');
    else if (DNS_CODES.has(code)) found.add('dns');
    else if (CONNECT_CODES.has(code)) found.add('connect');
  }
  const order: AttemptErrorClass[] = ['ssrf_blocked', 'timeout', 'tls', 'dns', 'connect'];
  return order.find((errorClass) => found.has(errorClass)) ?? 'network';
}

/** The error, its `cause`s and AggregateError members, breadth first, at most 16 of them. */
function errorChain(error: unknown): object[] {
  const seen: object[] = [];
  const queue: unknown[] = [error];
  while (queue.length > 0 && seen.length < 16) {
    const item = queue.shift();
    if (typeof item !== 'object' || item === null || seen.includes(item)) continue;
    seen.push(item);
    queue.push((item as { cause?: unknown }).cause);
    if (item instanceof AggregateError) queue.push(...(item.errors as unknown[]));
  }
  return seen;
}

/** `CODE: message` of the error and its first cause, for the attempt log. */
function describe(error: unknown): string {
  const [outer, inner] = errorChain(error) as { code?: unknown; message?: unknown }[];
  const one = (e: { code?: unknown; message?: unknown }) =>
    [
      typeof e.code === 'string' ? e.code : undefined,
      typeof e.message === 'string' && e.message !== '' ? e.message : undefined,
    ]
      .filter((part) => part !== undefined)
      .join(': ');
  const text = [outer, inner]
    .filter((e) => e !== undefined)
    .map(one)
    .filter((t) => t !== '')
    .join(' <- ')
    .replace(/\s+/g, ' ')
    .trim();
  return text === '' ? 'request failed' : text;
}

/** Keeps messages short and free of header values: signatures must never reach the attempt log. */
function redact(message: string, headers: Record<string, string>): string {
  let text = message;
  for (const value of Object.values(headers)) {
    if (value.length >= 8) text = text.split(value).join('[redacted]');
  }
  return text.length > MESSAGE_MAX_CHARS ? `${text.slice(0, MESSAGE_MAX_CHARS - 1)}…` : text;
}

/** At most `maxBytes` of UTF-8 text from `bytes`, never ending in a split character. */
function utf8Prefix(bytes: Buffer, maxBytes: number): string {
  const cut = (buffer: Buffer) => {
    if (buffer.length <= maxBytes) return buffer;
    let end = maxBytes;
    // Step back over continuation bytes (10xxxxxx) so the cut falls between characters.
    for (let i = 0; i < 3 && end > 0 && ((buffer[end] ?? 0) & 0xc0) === 0x80; i++) end--;
    return buffer.subarray(0, end);
  };
  const text = cut(bytes).toString('utf8');
  // Invalid bytes decode to U+FFFD (3 bytes), which can push the text past the limit; cut once more.
  const encoded = Buffer.from(text, 'utf8');
  return encoded.length <= maxBytes ? text : cut(encoded).toString('utf8');
}
