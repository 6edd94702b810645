import { formEncode } from '../../domain/credential-redaction.js';
import type { ReceiverAuth } from '../../domain/receiver-auth.js';
import { LruMap } from '../../lib/lru-map.js';
import type { CachedToken } from '../../store/receiver-tokens.js';
import type { SendRequest, SendResult } from './http-sender.js';

type OAuth2Auth = Extract<ReceiverAuth, { type: 'oauth2_client_credentials' }>;

/** The tokens all workers share (store/receiver-tokens.ts). */
interface SharedTokenCache {
  get(clientId: string): Promise<{ cached: CachedToken; stored: string } | undefined>;
  set(clientId: string, cached: CachedToken, nowMs: number): Promise<string>;
  forget(clientId: string, stored: string): Promise<void>;
}

export type TokenResult =
  | {
      ok: true;
      /** The access token: it goes into the request's Authorization header and nowhere else. */
      token: string;
      /** Fetched for this request (a 401 with it is the receiver's answer, not a stale token). */
      fresh: boolean;
      clientId: string;
      /** The shared cache's raw value it came from ('' when it is not there), for forgetting it. */
      stored: string;
    }
  | {
      ok: false;
      /** Why there is none; it may quote the endpoint's error text, which sendAuthorized redacts and caps. */
      message: string;
      durationMs: number;
    };

export interface ReceiverTokensDeps {
  cache: SharedTokenCache;
  /** Sends the token request (the delivery sender: the SSRF guard and the egress path apply). */
  sender: { send(request: SendRequest): Promise<SendResult> };
  /** An opaque id per client (token URL, credentials, scope, audience): tokens are kept and shared under it. */
  clientIdOf: (auth: OAuth2Auth) => string;
  nowMs: () => number;
  timeoutMs: number;
  /** Told of each token request's outcome (metrics). */
  onRequested?: (outcome: 'ok' | 'error') => void;
}

/** A token is used until this much before its expiry (a tenth of its life, at most a minute), so none expires in flight. */
const MAX_EXPIRY_MARGIN_MS = 60_000;
/** The life assumed for a token whose endpoint states none (RFC 6749 makes expires_in optional). */
const DEFAULT_TOKEN_LIFE_S = 300;
/** A token endpoint's answer is read up to this (JWT access tokens run to a few KiB). */
const TOKEN_RESPONSE_MAX_BYTES = 64 * 1024;

/**
 * OAuth2 client-credentials tokens for receivers (RFC 6749 §4.4): fetched from the webhook's token
 * endpoint through the delivery sender, kept in this process and in Redis (sealed) until shortly
 * before they expire, so every worker uses one token per client; one request per client at a time
 * in a process. A receiver's 401 to a kept token makes `refresh` forget it (here and, unless
 * replaced meanwhile, in Redis) and fetch another once. Tokens appear in no result message.
 */
export class ReceiverTokens {
  readonly #deps: ReceiverTokensDeps;
  readonly #local = new LruMap<string, { cached: CachedToken; stored: string }>(10_000);
  readonly #fetching = new Map<string, Promise<TokenResult>>();
  /** Each auth object's client id: worked out (a keyed digest) once per cached copy of a webhook, not per delivery. */
  readonly #clientIds = new WeakMap<OAuth2Auth, string>();

  constructor(deps: ReceiverTokensDeps) {
    this.#deps = deps;
  }

  /** A usable token for `auth`: this process's, the workers' shared one, or a new one. */
  async get(auth: OAuth2Auth): Promise<TokenResult> {
    const clientId = this.#clientIdOf(auth);
    const nowMs = this.#deps.nowMs();
    const local = this.#local.get(clientId);
    if (local !== undefined && local.cached.useUntilMs > nowMs) return this.#kept(clientId, local);
    const shared = await this.#deps.cache.get(clientId).catch(() => undefined);
    if (shared !== undefined && shared.cached.useUntilMs > nowMs) {
      this.#local.set(clientId, shared);
      return this.#kept(clientId, shared);
    }
    return this.#fetchOnce(clientId, auth);
  }

  /** After a 401 to `used`: forgets it everywhere it is still the token kept, then gets another (fetched unless a worker already has). */
  async refresh(auth: OAuth2Auth, used: Extract<TokenResult, { ok: true }>): Promise<TokenResult> {
    const local = this.#local.get(used.clientId);
    if (local?.cached.token === used.token) this.#local.delete(used.clientId);
    if (used.stored !== '') await this.#deps.cache.forget(used.clientId, used.stored).catch(() => undefined);
    const result = await this.get(auth);
    // Another worker may still hold the same refused token in Redis; a second forget and a fetch then.
    return result.ok && result.token === used.token ? this.#fetchOnce(used.clientId, auth) : result;
  }

  #clientIdOf(auth: OAuth2Auth): string {
    let clientId = this.#clientIds.get(auth);
    if (clientId === undefined) {
      clientId = this.#deps.clientIdOf(auth);
      this.#clientIds.set(auth, clientId);
    }
    return clientId;
  }

  #kept(clientId: string, entry: { cached: CachedToken; stored: string }): TokenResult {
    return { ok: true, token: entry.cached.token, fresh: false, clientId, stored: entry.stored };
  }

  /** One token request per client at a time: concurrent callers share its result. */
  #fetchOnce(clientId: string, auth: OAuth2Auth): Promise<TokenResult> {
    let fetching = this.#fetching.get(clientId);
    if (fetching === undefined) {
      fetching = this.#fetch(clientId, auth).finally(() => this.#fetching.delete(clientId));
      this.#fetching.set(clientId, fetching);
    }
    return fetching;
  }

  async #fetch(clientId: string, auth: OAuth2Auth): Promise<TokenResult> {
    const result = await this.#deps.sender.send(tokenRequest(auth, this.#deps.timeoutMs));
    const read = readTokenResponse(result, auth.tokenUrl);
    this.#deps.onRequested?.(read.ok ? 'ok' : 'error');
    if (!read.ok) return { ok: false, message: read.message, durationMs: result.durationMs };
    const nowMs = this.#deps.nowMs();
    const lifeMs = read.expiresInS * 1000;
    const cached = { token: read.token, useUntilMs: nowMs + lifeMs - Math.min(MAX_EXPIRY_MARGIN_MS, lifeMs / 10) };
    // Without Redis the token still serves this process; the next worker fetches its own.
    const stored = await this.#deps.cache.set(clientId, cached, nowMs).catch(() => '');
    this.#local.set(clientId, { cached, stored });
    return { ok: true, token: read.token, fresh: true, clientId, stored };
  }
}

/** The client-credentials grant request: the client authenticated by Basic (the default) or in the body. */
export function tokenRequest(auth: OAuth2Auth, timeoutMs: number): SendRequest & { body: string } {
  const form = new URLSearchParams({ grant_type: 'client_credentials' });
  if (auth.scope !== undefined) form.set('scope', auth.scope);
  if (auth.audience !== undefined) form.set('audience', auth.audience);
  const headers: Record<string, string> = {
    'content-type': 'application/x-www-form-urlencoded',
    accept: 'application/json',
  };
  const secret = auth.clientSecret ?? '';
  if (auth.tokenAuthMethod === 'client_secret_post') {
    form.set('client_id', auth.clientId);
    form.set('client_secret', secret);
  } else {
    const basic = Buffer.from(`${formEncode(auth.clientId)}:${formEncode(secret)}`, 'utf8').toString('base64');
    headers.authorization = `Basic ${basic}`;
  }
  return { url: auth.tokenUrl, headers, body: form.toString(), timeoutMs, keepBytes: TOKEN_RESPONSE_MAX_BYTES };
}

/**
 * The token in a token endpoint's answer, or why there is none: never quoting a token, but quoting
 * the endpoint's `error` and `error_description` whole, which may echo what it was sent (the
 * caller redacts and caps the message, see sendAuthorized).
 */
export function readTokenResponse(
  result: SendResult,
  tokenUrl: string,
): { ok: true; token: string; expiresInS: number } | { ok: false; message: string } {
  const endpoint = tokenEndpointName(tokenUrl);
  if (result.kind === 'error') return { ok: false, message: `token request to ${endpoint} failed: ${result.message}` };
  let body: Record<string, unknown> | undefined;
  try {
    const parsed: unknown = JSON.parse(result.bodySnippet);
    if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
      body = parsed as Record<string, unknown>;
  } catch {
    body = undefined;
  }
  if (result.status < 200 || result.status > 299) {
    // RFC 6749 §5.2: `error` and `error_description` say why; nothing else of the body is repeated.
    // Not cut here: a secret cut in two would no longer be recognised by the redaction.
    const why = [body?.error, body?.error_description]
      .filter((part): part is string => typeof part === 'string')
      .join(': ');
    return {
      ok: false,
      message: `token endpoint ${endpoint} answered ${result.status}${why === '' ? '' : ` (${why})`}`,
    };
  }
  const token = body?.access_token;
  if (typeof token !== 'string' || token === '' || !/^[\x21-\x7e]+$/.test(token))
    return { ok: false, message: `token endpoint ${endpoint} answered ${result.status} without a usable access_token` };
  const type = body?.token_type;
  if (typeof type === 'string' && type.toLowerCase() !== 'bearer')
    return {
      ok: false,
      message: `token endpoint ${endpoint} issued a ${type} token; only Bearer is supported`,
    };
  const expiresIn = Number(body?.expires_in);
  return {
    ok: true,
    token,
    expiresInS: Number.isFinite(expiresIn) && expiresIn > 0 ? expiresIn : DEFAULT_TOKEN_LIFE_S,
  };
}

/** The token URL without its query (which could carry a credential) for messages. */
function tokenEndpointName(tokenUrl: string): string {
  try {
    const url = new URL(tokenUrl);
    return `${url.origin}${url.pathname}`;
  } catch {
    return 'the token URL';
  }
}
