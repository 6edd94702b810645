import type { FastifyInstance } from 'fastify';
import { PORTAL_CSP } from './routes/portal-assets.js';

/**
 * The headers every answer carries, whatever made it: a route, the 404 handler, the error handler,
 * Swagger UI. They are set in one onSend hook on the root instance because an answer that escapes a
 * route's own headers (a 404 under /portal/, a 401 from an authorizer, a 500) is exactly the one
 * nobody thinks of:
 *
 * - `X-Content-Type-Options: nosniff`: a browser never runs an answer as a type it was not sent as
 *   (a receiver's response body in JSON read as HTML, say).
 * - `Cache-Control: no-store` unless the route chose its own caching: answers hold webhook secrets,
 *   one-time link tokens, CSRF tokens and vendors' deliveries, which no shared cache and no browser's
 *   disk may keep. The answers meant to be cached (the key set, the portal's hashed assets) say so.
 * - `Strict-Transport-Security` when the answer goes out over https (directly, through a proxy
 *   HOOKLINE_TRUST_PROXY names, or when HOOKLINE_PUBLIC_URL is https), so a browser that once
 *   reached the API over https never falls back to plain http, where the portal's cookie and links
 *   could be read.
 * - Under `/portal`: the portal's Content-Security-Policy and `Referrer-Policy: no-referrer`, on its
 *   404s and its API's answers as much as on its page, so any answer opened directly is held to them.
 *
 * `/docs` (Swagger UI) gets DOCS_CSP from the plugin itself (its `staticCSP` option).
 */

/** One year: browsers keep to https for that long after any answer that carries it. */
const HSTS = 'max-age=31536000';

/**
 * Swagger UI's policy: its own scripts only; inline styles, which its components set as attributes;
 * requests to this origin only (the document and "Try it out"); no framing, forms or base changes.
 */
export const DOCS_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** `/portal`, `/portal/…` and `/portal?…`, not `/portals`. */
const PORTAL_PATH = /^\/portal(?:[/?]|$)/;

/** Adds the headers above to every answer of `app`; `publicUrlHttps`: HOOKLINE_PUBLIC_URL is https. */
export function secureEveryAnswer(app: FastifyInstance, options: { publicUrlHttps: boolean }): void {
  app.addHook('onSend', async (request, reply, payload) => {
    void reply.header('x-content-type-options', 'nosniff');
    if (!reply.hasHeader('cache-control')) void reply.header('cache-control', 'no-store');
    if (options.publicUrlHttps || request.protocol === 'https') void reply.header('strict-transport-security', HSTS);
    if (PORTAL_PATH.test(request.url))
      void reply.header('content-security-policy', PORTAL_CSP).header('referrer-policy', 'no-referrer');
    return payload;
  });
}
