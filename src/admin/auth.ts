import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { timingSafeEqual } from 'node:crypto';
import { hasRole, permits, type PortalPermission, type Principal, type Role } from '../domain/roles.js';
import type { OpenedSession, PortalSessionLookup } from '../store/portal-sessions.js';
import { keyFingerprint, type ApiKeyLookup } from '../store/api-keys.js';
import type { RequestCounter } from '../store/rate-limiter.js';
import { ApiError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
    /** Set by portalSessionHook: the portal session whose cookie came with the request. */
    portalSession?: OpenedSession;
  }
}

interface AuthorizeOptions {
  /**
   * Whether the per-key request limit applies; default true. Event ingest, the platform's own
   * trusted traffic, turns it off and is bounded by its events-per-second limit instead.
   */
  requestLimited?: boolean;
  /**
   * The permission a vendor portal session needs here; when set, the route also accepts the portal's
   * session cookie (with its CSRF header) in place of `X-API-Key`. Unset: API keys only.
   */
  portal?: PortalPermission;
}

/** A hook that lets a request through when its key has `role` (or any of `role` when several are given). */
export type Authorizer = (role: Role | readonly Role[], options?: AuthorizeOptions) => onRequestAsyncHookHandler;

/** What a route's authorizer hook checks: the OpenAPI document derives its security and 401/403/429 answers from it. */
export interface Authorization {
  /** Any of these lets a request through. */
  roles: readonly Role[];
  /** Whether the per-key request limit applies (it answers 429 when configured). */
  requestLimited: boolean;
  /** The permission a portal session needs; undefined when the route takes API keys only. */
  portal: PortalPermission | undefined;
  /** Only a portal session's cookie authenticates here (the portal's own session routes), with or without its CSRF header. */
  sessionOnly?: { csrf: boolean };
}

/** Every hook an authorizer made, with what it checks. */
const authorizations = new WeakMap<object, Authorization>();

/** What the authorizer among a route's onRequest hooks checks; undefined for a route without one. */
export function authorizationOf(onRequest: unknown): Authorization | undefined {
  const hooks: unknown[] = Array.isArray(onRequest) ? onRequest : [onRequest];
  for (const hook of hooks) {
    const found = typeof hook === 'function' ? authorizations.get(hook) : undefined;
    if (found) return found;
  }
  return undefined;
}

/** A request limit of the admin API: per API key, or per client address for requests that authenticate nothing. */
export interface RateLimit {
  counter: RequestCounter;
  /** Requests per second per key (or address); 0 turns the limit off. */
  perSecond: number;
  nowMs: () => number;
}

/**
 * Counts a request that authenticates nothing (no key, a bad key or cookie, a link being opened)
 * against its client address's budget, and refuses it with 429 past the budget. The address is the
 * connection's, or the one a proxy HOOKLINE_TRUST_PROXY names forwarded.
 */
export type AddressGuard = (request: FastifyRequest, reply: FastifyReply) => Promise<void>;

/** The address guard of a per-address limit; one that lets everything through when there is none. */
export function addressGuard(limit: RateLimit | undefined): AddressGuard {
  if (limit === undefined || limit.perSecond <= 0) return async () => undefined;
  return async (request, reply) => {
    const n = await limit.counter.hit(request.ip, limit.nowMs());
    if (n <= limit.perSecond) return;
    void reply.header('retry-after', '1');
    throw new ApiError(
      'rate_limited',
      `More than ${limit.perSecond} requests per second from this address authenticated nothing; retry after 1 s`,
    );
  };
}

/**
 * A request whose credentials were refused (401) counts against its address's budget: guessing keys,
 * cookies or tokens, or hammering with a revoked key, soon answers 429 (the guard throws) instead.
 */
async function countRefusal(
  guard: AddressGuard,
  error: unknown,
  request: FastifyRequest,
  reply: FastifyReply,
): Promise<void> {
  if (error instanceof ApiError && error.statusCode === 401) await guard(request, reply);
}

/**
 * The cookie that carries a vendor portal session. The `__Host-` prefix makes browsers take it only
 * when it is Secure, has Path=/ and no Domain: no sibling subdomain (a vendor-hosted page under the
 * same site) and no plain-http page can set or shadow it, so a session cannot be planted.
 */
export const PORTAL_COOKIE = '__Host-hookline_portal';

/** The request header a portal session's requests echo its CSRF token in. */
export const CSRF_HEADER = 'x-csrf-token';

/** The value of cookie `name` in a request's Cookie header, if it is there once. */
function cookieOf(request: FastifyRequest, name: string): string | undefined {
  const header = request.headers.cookie;
  if (header === undefined) return undefined;
  const values = header
    .split(';')
    .map((pair) => pair.trim())
    .filter((pair) => pair.startsWith(`${name}=`))
    .map((pair) => pair.slice(name.length + 1));
  // Two cookies of one name (a sibling path or domain set one) are refused rather than guessed between.
  return values.length === 1 ? values[0] : undefined;
}

/**
 * Whether the browser says (Sec-Fetch-Site) that a request comes from somewhere other than `allowed`;
 * false when it says nothing (an older browser, or no browser).
 */
export function fromAnotherSite(request: FastifyRequest, allowed: readonly string[]): boolean {
  const site = request.headers['sec-fetch-site'];
  return site !== undefined && !allowed.includes(String(site));
}

/**
 * Whether a cookie-authenticated request echoes the session's CSRF token in its header: a cross-site
 * form or image cannot set headers, and another origin cannot read the token.
 */
function echoesCsrfToken(request: FastifyRequest, csrfToken: string): boolean {
  const echoed = request.headers[CSRF_HEADER];
  if (typeof echoed !== 'string' || echoed.length !== csrfToken.length) return false;
  return timingSafeEqual(Buffer.from(echoed, 'utf8'), Buffer.from(csrfToken, 'utf8'));
}

/** The principal a portal session acts as: a vendor key of that vendor, with the session's permission. */
function portalPrincipal({ session }: OpenedSession): Principal {
  return {
    keyId: session.id,
    name: `portal session ${session.id}`,
    roles: ['vendor'],
    vendorId: session.vendorId,
    portal: { sessionId: session.id, permission: session.permission },
  };
}

/**
 * Authenticates a portal session's cookie for a route that accepts one: 401 when the session is
 * unknown, expired or revoked; 403 when the CSRF check fails or the permission is too low.
 */
async function authenticatePortal(
  request: FastifyRequest,
  sessions: PortalSessionLookup,
  needs: PortalPermission,
  options: { csrf: boolean } = { csrf: true },
): Promise<OpenedSession> {
  const cookie = cookieOf(request, PORTAL_COOKIE);
  const opened = cookie === undefined ? undefined : await sessions.authenticate(cookie);
  if (!opened)
    throw new ApiError('unauthorized', 'Missing or invalid API key, or the portal session has expired or was revoked');
  // Every cookie request, the one that answers the CSRF token included, must come from this origin
  // when the browser says where it comes from (Sec-Fetch-Site): a sibling subdomain is same-site, and
  // SameSite=Strict alone would let its requests carry the cookie.
  if (fromAnotherSite(request, ['same-origin'])) throw new ApiError('csrf_failed');
  if (options.csrf && !echoesCsrfToken(request, opened.csrfToken)) throw new ApiError('csrf_failed');
  if (!permits(opened.session.permission, needs)) {
    throw new ApiError(
      'portal_permission',
      `This portal session has the ${opened.session.permission} permission; this needs ${needs}`,
    );
  }
  return opened;
}

/**
 * The hook of the portal's own session routes: only the session cookie authenticates, and `csrf`
 * says whether the request must echo the CSRF token too. The session lands on `request.portalSession`.
 */
export function portalSessionHook(
  sessions: PortalSessionLookup,
  options: { csrf: boolean },
  guard: AddressGuard,
): onRequestAsyncHookHandler {
  const hook = async function authorizePortalSession(request: FastifyRequest, reply: FastifyReply): Promise<void> {
    try {
      request.portalSession = await authenticatePortal(request, sessions, 'read', options);
    } catch (error) {
      await countRefusal(guard, error, request, reply);
      throw error;
    }
  };
  authorizations.set(hook, { roles: [], requestLimited: false, portal: 'read', sessionOnly: options });
  return hook;
}

/**
 * Builds the hook that authenticates `X-API-Key` (or, on routes that take one, a portal session's
 * cookie) and checks a role. It runs on request, before the body is read, so an unauthenticated
 * caller learns nothing from validation errors.
 */
export function createAuthorizer(
  apiKeys: ApiKeyLookup,
  guard: AddressGuard,
  rateLimit?: RateLimit,
  portalSessions?: PortalSessionLookup,
): Authorizer {
  return (role, options = {}) => {
    const roles: readonly Role[] = typeof role === 'string' ? [role] : role;
    const limited = rateLimit && rateLimit.perSecond > 0 && options.requestLimited !== false ? rateLimit : undefined;
    const portal = options.portal;
    const authenticate = async (request: FastifyRequest, reply: FastifyReply): Promise<void> => {
      const header = request.headers['x-api-key'];
      const presented = Array.isArray(header) ? undefined : header?.trim();
      // The credential's lookup and its request count go out together: one round trip. A portal
      // session's requests count against a limit of their own (by its cookie), as a key's do.
      const count = (credential: string) =>
        limited ? limited.counter.hit(keyFingerprint(credential), limited.nowMs()) : Promise.resolve(0);
      const refuseOverLimit = (n: number, whose: string) => {
        if (!limited || n <= limited.perSecond) return;
        void reply.header('retry-after', '1');
        throw new ApiError(
          'rate_limited',
          `Rate limit of ${limited.perSecond} requests per second for this ${whose} exceeded; retry after 1 s`,
        );
      };
      const cookie =
        presented || portal === undefined || portalSessions === undefined
          ? undefined
          : cookieOf(request, PORTAL_COOKIE);
      if (cookie !== undefined) {
        const [opened, n] = await Promise.all([authenticatePortal(request, portalSessions!, portal!), count(cookie)]);
        refuseOverLimit(n, 'session');
        request.principal = portalPrincipal(opened);
        return;
      }
      if (!presented) throw new ApiError('unauthorized');
      const [principal, n] = await Promise.all([apiKeys.authenticate(presented), count(presented)]);
      if (!principal) throw new ApiError('unauthorized');
      refuseOverLimit(n, 'API key');
      if (!roles.some((r) => hasRole(principal, r)))
        throw new ApiError('forbidden', `This API key does not have the ${roles.join(' or ')} role`);
      request.principal = principal;
    };
    const hook = async function authorize(request: FastifyRequest, reply: FastifyReply): Promise<void> {
      try {
        await authenticate(request, reply);
      } catch (error) {
        await countRefusal(guard, error, request, reply);
        throw error;
      }
    };
    authorizations.set(hook, { roles, requestLimited: options.requestLimited !== false, portal });
    return hook;
  };
}

/** The authenticated principal of a request that passed an authorizer hook. */
export function principalOf(request: FastifyRequest): Principal {
  if (!request.principal) throw new Error('route is missing its authorizer hook');
  return request.principal;
}

/** The vendor a vendor-scoped request acts for; 403 when the key has none. */
export function vendorOf(request: FastifyRequest): string {
  const vendorId = principalOf(request).vendorId;
  if (vendorId === undefined) throw new ApiError('no_vendor');
  return vendorId;
}
