import type { FastifyReply, FastifyRequest, onRequestAsyncHookHandler } from 'fastify';
import { hasRole, type Principal, type Role } from '../domain/roles.js';
import { keyFingerprint, type ApiKeyLookup } from '../store/api-keys.js';
import type { RequestCounter } from '../store/rate-limiter.js';
import { ApiError } from './errors.js';

declare module 'fastify' {
  interface FastifyRequest {
    principal?: Principal;
  }
}

interface AuthorizeOptions {
  /**
   * Whether the per-key request limit applies; default true. Event ingest, the platform's own
   * trusted traffic, turns it off and is bounded by its events-per-second limit instead.
   */
  requestLimited?: boolean;
}

/** A hook that lets a request through when its key has `role` (or any of `role` when several are given). */
export type Authorizer = (role: Role | readonly Role[], options?: AuthorizeOptions) => onRequestAsyncHookHandler;

/** What a route's authorizer hook checks: the OpenAPI document derives its security and 401/403/429 answers from it. */
export interface Authorization {
  /** Any of these lets a request through. */
  roles: readonly Role[];
  /** Whether the per-key request limit applies (it answers 429 when configured). */
  requestLimited: boolean;
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

/** The per-key request limit of the admin API. */
export interface RateLimit {
  counter: RequestCounter;
  /** Requests per second per API key; 0 turns the limit off. */
  perSecond: number;
  nowMs: () => number;
}

/**
 * Builds the hook that authenticates `X-API-Key` and checks a role. It runs on request, before the
 * body is read, so an unauthenticated caller learns nothing from validation errors.
 */
export function createAuthorizer(apiKeys: ApiKeyLookup, rateLimit?: RateLimit): Authorizer {
  return (role, options = {}) => {
    const roles: readonly Role[] = typeof role === 'string' ? [role] : role;
    const limited = rateLimit && rateLimit.perSecond > 0 && options.requestLimited !== false ? rateLimit : undefined;
    const hook = async function authorize(request: FastifyRequest, reply: FastifyReply): Promise<void> {
      const header = request.headers['x-api-key'];
      const presented = Array.isArray(header) ? undefined : header?.trim();
      if (!presented) throw new ApiError('unauthorized');
      // The lookup and the request count go out together: one round trip.
      const [principal, count] = await Promise.all([
        apiKeys.authenticate(presented),
        limited ? limited.counter.hit(keyFingerprint(presented), limited.nowMs()) : Promise.resolve(0),
      ]);
      if (!principal) throw new ApiError('unauthorized');
      if (limited && count > limited.perSecond) {
        void reply.header('retry-after', '1');
        throw new ApiError('rate_limited', `Rate limit of ${limited.perSecond} requests per second for this API key exceeded; retry after 1 s`);
      }
      if (!roles.some((r) => hasRole(principal, r))) throw new ApiError('forbidden', `This API key does not have the ${roles.join(' or ')} role`);
      request.principal = principal;
    };
    authorizations.set(hook, { roles, requestLimited: options.requestLimited !== false });
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
