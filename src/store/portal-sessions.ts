import { createHash, randomBytes, timingSafeEqual } from 'node:crypto';
import { formatDurationMs, parseDurationMs } from '../lib/duration.js';
import { PORTAL_PERMISSIONS, type PortalPermission } from '../domain/roles.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/** Session lifetimes an issuer may ask for: 5 minutes to 7 days, 24 h when not given. */
const PORTAL_TTL_MS = { min: 5 * 60_000, max: 7 * 86_400_000, default: 86_400_000 } as const;

/** Why `ttl` is not a session lifetime an issuer may ask for, or undefined when it is. */
export function ttlProblem(ttl: string): string | undefined {
  const ms = parseDurationMs(ttl);
  if (ms === undefined) return `ttl must be a duration such as 30m, 24h or 7d, not "${ttl.slice(0, 32)}"`;
  if (ms < PORTAL_TTL_MS.min || ms > PORTAL_TTL_MS.max) {
    return `ttl must be from ${formatDurationMs(PORTAL_TTL_MS.min)} to ${formatDurationMs(PORTAL_TTL_MS.max)}, not ${ttl}`;
  }
  return undefined;
}

/** The lifetime `ttl` asks for, in ms (the default when it is not a duration; check ttlProblem first). */
export const ttlMsOf = (ttl: string): number => parseDurationMs(ttl) ?? PORTAL_TTL_MS.default;

export interface PortalSession {
  id: string;
  vendorId: string;
  permission: PortalPermission;
  createdAtMs: number;
  expiresAtMs: number;
  /** The name of the API key (or `cli`) that minted the link: for the audit log, never a secret. */
  issuedBy: string;
  /** Whether the link's token was exchanged for a cookie (a link works once). */
  opened: boolean;
}

/** A session the browser holds a cookie for, with the CSRF token its requests must echo. */
export interface OpenedSession {
  session: PortalSession;
  csrfToken: string;
}

/** What the admin API's authorizer needs: a session from the cookie's value, or nothing. */
export interface PortalSessionLookup {
  authenticate(cookieValue: string): Promise<OpenedSession | undefined>;
}

const SESSION_ID_RE = /^ps_[0-9a-f]{24}$/;

/** Whether `text` has the shape of a session id (`ps_` and 24 hex digits). */
export const isSessionId = (text: string): boolean => SESSION_ID_RE.test(text);

const sha256 = (text: string) => createHash('sha256').update(text, 'utf8').digest('hex');

/** `<session id>.<secret>`: the shape of both the link's token and the cookie's value. */
function split(credential: string): { id: string; secret: string } | undefined {
  const dot = credential.indexOf('.');
  if (dot < 0) return undefined;
  const id = credential.slice(0, dot);
  const secret = credential.slice(dot + 1);
  return isSessionId(id) && /^[A-Za-z0-9_-]{43}$/.test(secret) ? { id, secret } : undefined;
}

/** Constant-time equality of two hex digests. */
function sameDigest(a: string | undefined, b: string): boolean {
  if (a === undefined || a.length !== b.length) return false;
  return timingSafeEqual(Buffer.from(a, 'utf8'), Buffer.from(b, 'utf8'));
}

type ExchangeCall = ScriptCall<
  [session: string],
  [tokenHash: string, cookieHash: string, csrf: string, nowMs: number],
  string[] | null
>;

function toSession(id: string, fields: Record<string, string>): PortalSession | undefined {
  const { vendorId, permission, createdAtMs, expiresAtMs, issuedBy } = fields;
  if (vendorId === undefined || !(PORTAL_PERMISSIONS as readonly string[]).includes(permission ?? '')) return undefined;
  return {
    id,
    vendorId,
    permission: permission as PortalPermission,
    createdAtMs: Number(createdAtMs),
    expiresAtMs: Number(expiresAtMs),
    issuedBy: issuedBy ?? '',
    opened: fields.cookieHash !== undefined,
  };
}

function pairs(reply: string[]): Record<string, string> {
  const fields: Record<string, string> = {};
  for (let i = 0; i + 1 < reply.length; i += 2) fields[reply[i]!] = reply[i + 1]!;
  return fields;
}

/**
 * Vendor portal sessions in Redis. A session is one hash that expires with the session; it holds
 * only SHA-256 digests of the link's token and of the cookie (both 256-bit random), so a copy of
 * Redis opens nothing. A sorted set per vendor lists its sessions for revoking them all at once.
 * Revoking deletes the hash: the next request made with its cookie answers 401.
 */
export class RedisPortalSessions implements PortalSessionLookup {
  private readonly exchangeScript: ExchangeCall;

  constructor(
    private readonly redis: Redis,
    private readonly keys: RedisKeys,
    private readonly nowMs: () => number = Date.now,
  ) {
    this.exchangeScript = defineScriptFile(redis, 'portal-sessions-exchange', 1);
  }

  /** Mints a session and its one-time link token; the token is returned once and never stored. */
  async issue(input: {
    vendorId: string;
    permission: PortalPermission;
    ttlMs: number;
    issuedBy: string;
  }): Promise<{ session: PortalSession; token: string }> {
    const now = this.nowMs();
    const session: PortalSession = {
      id: `ps_${randomBytes(12).toString('hex')}`,
      vendorId: input.vendorId,
      permission: input.permission,
      createdAtMs: now,
      expiresAtMs: now + input.ttlMs,
      issuedBy: input.issuedBy,
      opened: false,
    };
    const secret = randomBytes(32).toString('base64url');
    const key = this.keys.portal.session(session.id);
    const ofVendor = this.keys.portal.ofVendor(session.vendorId);
    // The session and the vendor's index live in different slots: the session first, so a crash
    // between the two leaves a session that expires on its own rather than an index entry to nothing.
    await this.redis
      .multi()
      .hset(key, {
        vendorId: session.vendorId,
        permission: session.permission,
        createdAtMs: String(now),
        expiresAtMs: String(session.expiresAtMs),
        issuedBy: session.issuedBy,
        tokenHash: sha256(secret),
      })
      .pexpireat(key, session.expiresAtMs)
      .exec();
    await this.redis
      .multi()
      .zremrangebyscore(ofVendor, '-inf', now)
      .zadd(ofVendor, session.expiresAtMs, session.id)
      .pexpireat(ofVendor, PORTAL_TTL_MS.max + now)
      .exec();
    return { session, token: `${session.id}.${secret}` };
  }

  /**
   * Trades a link's token for a cookie value and a CSRF token; undefined when the token is malformed,
   * already used, expired or revoked (the caller cannot tell which, by design).
   */
  async exchange(token: string): Promise<(OpenedSession & { cookieValue: string }) | undefined> {
    const parts = split(token);
    if (!parts) return undefined;
    const cookieSecret = randomBytes(32).toString('base64url');
    const csrfToken = randomBytes(32).toString('base64url');
    const reply = await this.exchangeScript(
      [this.keys.portal.session(parts.id)],
      sha256(parts.secret),
      sha256(cookieSecret),
      csrfToken,
      this.nowMs(),
    );
    const session = reply ? toSession(parts.id, pairs(reply)) : undefined;
    return session ? { session, csrfToken, cookieValue: `${parts.id}.${cookieSecret}` } : undefined;
  }

  /** The open session a cookie's value belongs to; undefined when unknown, revoked or expired. */
  async authenticate(cookieValue: string): Promise<OpenedSession | undefined> {
    const parts = split(cookieValue);
    if (!parts) return undefined;
    const fields = await this.redis.hgetall(this.keys.portal.session(parts.id));
    if (!sameDigest(fields.cookieHash, sha256(parts.secret)) || fields.csrf === undefined) return undefined;
    const session = toSession(parts.id, fields);
    return session && session.expiresAtMs > this.nowMs() ? { session, csrfToken: fields.csrf } : undefined;
  }

  /** One session by id (opened or not); undefined once revoked or expired. */
  async get(sessionId: string): Promise<PortalSession | undefined> {
    if (!isSessionId(sessionId)) return undefined;
    const session = toSession(sessionId, await this.redis.hgetall(this.keys.portal.session(sessionId)));
    return session && session.expiresAtMs > this.nowMs() ? session : undefined;
  }

  /** A vendor's sessions that have not expired or been revoked, newest first. */
  async list(vendorId: string): Promise<PortalSession[]> {
    const ids = await this.redis.zrangebyscore(this.keys.portal.ofVendor(vendorId), this.nowMs(), '+inf');
    const sessions = await Promise.all(ids.map((id) => this.get(id)));
    return sessions
      .filter((s): s is PortalSession => s !== undefined && s.vendorId === vendorId)
      .sort((a, b) => b.createdAtMs - a.createdAtMs);
  }

  /** Revokes one session: its link and cookie stop working at once. Resolves with it, or undefined when there was none. */
  async revoke(sessionId: string): Promise<PortalSession | undefined> {
    const session = await this.get(sessionId);
    if (!session) return undefined;
    await this.redis.del(this.keys.portal.session(sessionId));
    await this.redis.zrem(this.keys.portal.ofVendor(session.vendorId), sessionId);
    return session;
  }

  /** Revokes every session of a vendor; resolves with how many were live. */
  async revokeVendor(vendorId: string): Promise<number> {
    const ofVendor = this.keys.portal.ofVendor(vendorId);
    const ids = await this.redis.zrange(ofVendor, 0, -1);
    // One DEL per session: each hash is in a slot of its own (Redis Cluster).
    const deleted = await Promise.all(ids.map((id) => this.redis.del(this.keys.portal.session(id))));
    await this.redis.del(ofVendor);
    return deleted.reduce((sum, n) => sum + n, 0);
  }
}
