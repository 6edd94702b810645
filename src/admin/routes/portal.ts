import type { FastifyReply } from 'fastify';
import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import {
  CSRF_HEADER,
  fromAnotherSite,
  PORTAL_COOKIE,
  portalSessionHook,
  principalOf,
  type AddressGuard,
  type Authorizer,
} from '../auth.js';
import { ApiError } from '../errors.js';
import { errorResponses, noQueryParameters, queryParameters } from '../schemas.js';
import { externalIdSchema } from '../../domain/ids.js';
import { portalLink, portalLinkBase, type ListenAddress } from '../../domain/portal-link.js';
import { PORTAL_PERMISSIONS } from '../../domain/roles.js';
import type { Logger } from '../../logger.js';
import {
  isSessionId,
  ttlMsOf,
  ttlProblem,
  type PortalSession,
  type RedisPortalSessions,
} from '../../store/portal-sessions.js';

const permissionSchema = z
  .enum(PORTAL_PERMISSIONS)
  .describe('read: view; replay: + replays and test events; manage: + create, edit, delete, rotate secrets, enable.');

const sessionSchema = z
  .object({
    session_id: z.string(),
    vendor_id: z.string(),
    permission: permissionSchema,
    created_at: z.string(),
    expires_at: z.string(),
    opened: z.boolean().describe('Whether the link was opened (its one-time token exchanged for a cookie).'),
    issued_by: z.string().describe('The name of the API key that issued the link (`cli` for `hookline portal link`).'),
  })
  .meta({ id: 'PortalSession' });

const openedSchema = z
  .object({
    session_id: z.string(),
    vendor_id: z.string(),
    permission: permissionSchema,
    expires_at: z.string(),
    csrf_token: z.string().describe(`Echo it in the ${CSRF_HEADER} header of every request the portal makes.`),
  })
  .meta({ id: 'PortalSessionOpened' });

const toSession = (s: PortalSession): z.infer<typeof sessionSchema> => ({
  session_id: s.id,
  vendor_id: s.vendorId,
  permission: s.permission,
  created_at: new Date(s.createdAtMs).toISOString(),
  expires_at: new Date(s.expiresAtMs).toISOString(),
  opened: s.opened,
  issued_by: s.issuedBy,
});

const toOpened = (s: PortalSession, csrfToken: string): z.infer<typeof openedSchema> => ({
  session_id: s.id,
  vendor_id: s.vendorId,
  permission: s.permission,
  expires_at: new Date(s.expiresAtMs).toISOString(),
  csrf_token: csrfToken,
});

export interface PortalRouteDeps {
  authorize: Authorizer;
  /** Counts requests that authenticate nothing per client address (every link opening is one). */
  guardAddress: AddressGuard;
  sessions: Pick<
    RedisPortalSessions,
    'issue' | 'exchange' | 'authenticate' | 'get' | 'list' | 'revoke' | 'revokeVendor'
  >;
  /** Where browsers reach the portal (HOOKLINE_PUBLIC_URL); unset: see portalLinkBase. */
  publicUrl: string | undefined;
  /** The configured listen address (HOOKLINE_API_HOST and _PORT); the bound one takes its place once the API listens. */
  listenAddress?: ListenAddress;
  logger: Logger;
  nowMs: () => number;
}

/**
 * The vendor portal's sessions: issuing and revoking magic links (`/admin/v1/portal/sessions`, role
 * portal:issue), and the browser's side (`/portal/v1/session`): trading a link's one-time token for
 * a session cookie, reading the session, signing out.
 */
export function portalSessionRoutes(deps: PortalRouteDeps): FastifyPluginAsyncZod {
  /**
   * The session cookie: HttpOnly (no script reads it), SameSite=Strict (no cross-site request
   * carries it), and always Secure with Path=/ and no Domain, as its `__Host-` name requires.
   * Browsers keep a Secure cookie over https and on loopback (http://localhost, 127.0.0.1), which is
   * where links point (portalLinkBase), so it is never sent in clear.
   */
  const setCookie = (reply: FastifyReply, value: string, maxAgeSec: number) => {
    void reply
      .header(
        'set-cookie',
        `${PORTAL_COOKIE}=${value}; Path=/; Secure; HttpOnly; SameSite=Strict; Max-Age=${maxAgeSec}`,
      )
      .header('cache-control', 'no-store');
  };
  const log = (event: string, session: PortalSession, fields: Record<string, unknown>, message: string) =>
    deps.logger.info(
      { event, sessionId: session.id, vendorId: session.vendorId, permission: session.permission, ...fields },
      message,
    );

  return async (app) => {
    const onIssue = deps.authorize('portal:issue');
    const tags = ['portal'];

    app.post(
      '/admin/v1/portal/sessions',
      {
        onRequest: onIssue,
        schema: {
          tags,
          summary: 'Issue a vendor portal link',
          description:
            'Mints a session for one vendor and answers its link: `<HOOKLINE_PUBLIC_URL>/portal/#token=<one-time token>` (without ' +
            'the setting, the API’s own address when it listens on loopback; never the request’s Host header; https, or http on ' +
            'loopback only). The token sits in the URL fragment, which browsers never send to a server, and works once: the page ' +
            'trades it for the __Host-hookline_portal session cookie (Secure, HttpOnly, SameSite=Strict). The session lasts ttl (5m to 7d, default 24h) unless revoked. Hand the url to the vendor ' +
            'only; it is not shown again.',
          querystring: noQueryParameters,
          body: z
            .object({
              vendor_id: externalIdSchema.describe('The vendor whose webhooks the portal shows.'),
              permission: permissionSchema.default('read'),
              ttl: z
                .string()
                .default('24h')
                .superRefine((ttl, ctx) => {
                  const problem = ttlProblem(ttl);
                  if (problem) ctx.addIssue({ code: 'custom', message: problem });
                })
                .describe('How long the session lasts: 5m to 7d; default 24h.'),
            })
            .strict(),
          response: {
            201: sessionSchema.extend({ url: z.string().describe('The link to hand to the vendor; it works once.') }),
            ...errorResponses(400, 401, 403, 409, 413, 415, 500),
          },
        },
      },
      async (request, reply) => {
        const { vendor_id: vendorId, permission, ttl } = request.body;
        const bound = request.server.server.address();
        const base = portalLinkBase(
          deps.publicUrl,
          bound !== null && typeof bound === 'object' ? { host: bound.address, port: bound.port } : deps.listenAddress,
        );
        if (base === undefined) throw new ApiError('public_url_required');
        const issuer = principalOf(request);
        const { session, token } = await deps.sessions.issue({
          vendorId,
          permission,
          ttlMs: ttlMsOf(ttl),
          issuedBy: issuer.name,
        });
        log(
          'portal.session_issued',
          session,
          { keyId: issuer.keyId, expiresAt: new Date(session.expiresAtMs).toISOString() },
          'portal link issued',
        );
        return reply
          .code(201)
          .header('cache-control', 'no-store')
          .send({ ...toSession(session), url: portalLink(base, token) });
      },
    );

    app.get(
      '/admin/v1/portal/sessions',
      {
        onRequest: onIssue,
        schema: {
          tags,
          summary: 'List a vendor’s live portal sessions',
          description: 'Sessions that have not expired or been revoked, newest first; never their tokens.',
          querystring: queryParameters({ vendor_id: externalIdSchema.describe('The vendor.') }),
          response: { 200: z.object({ sessions: z.array(sessionSchema) }), ...errorResponses(400, 401, 403, 500) },
        },
      },
      async (request) => ({ sessions: (await deps.sessions.list(request.query.vendor_id)).map(toSession) }),
    );

    app.delete(
      '/admin/v1/portal/sessions/:session_id',
      {
        onRequest: onIssue,
        schema: {
          tags,
          summary: 'Revoke a portal session',
          description: 'Its link and its cookie stop working at once: the portal’s next request answers 401.',
          params: z.object({ session_id: z.string().describe('Session id (`ps_` and 24 hex digits).') }),
          querystring: noQueryParameters,
          response: { 204: z.null().describe('Revoked.'), ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request, reply) => {
        const sessionId = request.params.session_id;
        if (!isSessionId(sessionId)) throw new ApiError('invalid_session_id');
        const revoked = await deps.sessions.revoke(sessionId);
        if (!revoked) throw new ApiError('portal_session_not_found');
        log('portal.session_revoked', revoked, { keyId: principalOf(request).keyId }, 'portal session revoked');
        return reply.code(204).send(null);
      },
    );

    app.delete(
      '/admin/v1/portal/sessions',
      {
        onRequest: onIssue,
        schema: {
          tags,
          summary: 'Revoke every portal session of a vendor',
          description: 'At once: links not yet opened and open sessions alike. Answers how many were live.',
          querystring: queryParameters({ vendor_id: externalIdSchema.describe('The vendor.') }),
          response: { 200: z.object({ revoked: z.number().int() }), ...errorResponses(400, 401, 403, 500) },
        },
      },
      async (request) => {
        const vendorId = request.query.vendor_id;
        const revoked = await deps.sessions.revokeVendor(vendorId);
        deps.logger.info(
          { event: 'portal.sessions_revoked', vendorId, revoked, keyId: principalOf(request).keyId },
          'every portal session of a vendor revoked',
        );
        return { revoked };
      },
    );

    app.post(
      '/portal/v1/session',
      {
        // Every opening is a guess at a token until it succeeds: each counts against its address.
        onRequest: deps.guardAddress,
        schema: {
          tags,
          summary: 'Open a portal session with a link’s token',
          description:
            'Trades the one-time token from the link’s fragment for the session cookie, __Host-hookline_portal (Secure, Path=/, no ' +
            'Domain, HttpOnly, SameSite=Strict: browsers keep it over https and on loopback) and answers the CSRF token the portal must echo in X-CSRF-Token. A token works once; a used, expired or revoked ' +
            'one answers 401.',
          querystring: noQueryParameters,
          body: z.object({ token: z.string().max(200).describe('The value after `#token=` in the link.') }).strict(),
          response: { 200: openedSchema, ...errorResponses(400, 401, 403, 413, 415, 500) },
        },
      },
      async (request, reply) => {
        // A cross-site page must not log a visitor into a session of its choosing.
        if (fromAnotherSite(request, ['same-origin', 'none'])) throw new ApiError('csrf_failed');
        const opened = await deps.sessions.exchange(request.body.token);
        if (!opened) throw new ApiError('portal_token_invalid');
        log('portal.session_opened', opened.session, {}, 'portal link opened');
        setCookie(
          reply,
          opened.cookieValue,
          Math.max(1, Math.floor((opened.session.expiresAtMs - deps.nowMs()) / 1000)),
        );
        return toOpened(opened.session, opened.csrfToken);
      },
    );

    app.get(
      '/portal/v1/session',
      {
        onRequest: portalSessionHook(deps.sessions, { csrf: false }, deps.guardAddress),
        schema: {
          tags,
          summary: 'The portal session of this browser',
          description:
            'What the session cookie opens: vendor, permission, expiry, and the CSRF token (a reloaded page reads it here). The ' +
            'one cookie request that needs no X-CSRF-Token; refused, like every other, when the browser says it comes from ' +
            'another origin (Sec-Fetch-Site).',
          querystring: noQueryParameters,
          response: { 200: openedSchema, ...errorResponses(401, 403, 500) },
        },
      },
      async (request, reply) => {
        const { session, csrfToken } = request.portalSession!;
        void reply.header('cache-control', 'no-store');
        return toOpened(session, csrfToken);
      },
    );

    app.delete(
      '/portal/v1/session',
      {
        onRequest: portalSessionHook(deps.sessions, { csrf: true }, deps.guardAddress),
        schema: {
          tags,
          summary: 'Sign out of the portal',
          description: 'Revokes this browser’s session and clears its cookie.',
          querystring: noQueryParameters,
          response: { 204: z.null().describe('Signed out.'), ...errorResponses(401, 403, 500) },
        },
      },
      async (request, reply) => {
        const { session } = request.portalSession!;
        await deps.sessions.revoke(session.id);
        log('portal.session_closed', session, {}, 'portal session signed out');
        setCookie(reply, '', 0);
        return reply.code(204).send(null);
      },
    );
  };
}
