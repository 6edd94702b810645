import { existsSync, readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import type { FastifyPluginAsync } from 'fastify';
import { errorBody } from '../errors.js';
import type { Logger } from '../../logger.js';

/**
 * The vendor portal's browser app, served by the API process under `/portal/` from the files
 * `npm run build` writes (`dist/portal/`: index.html and assets/). The files are read once, when
 * the server is built, and served from memory: no request touches the file system, so no path a
 * client sends can reach a file outside the set.
 */

/**
 * The portal's Content-Security-Policy: only its own script and styles, no inline code, no other
 * origin, no framing. Sent on every answer under /portal (see security-headers.ts), HTML or not, so a
 * file opened directly is held to it too.
 */
export const PORTAL_CSP =
  "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.map': 'application/json; charset=utf-8',
};

/** esbuild's `[name]-[hash]` file names: a changed file gets a new name, so it may be cached for good. */
const HASHED_NAME_RE = /-[A-Z0-9]{8}\.[a-z]+$/;

interface Asset {
  body: Buffer;
  contentType: string;
  cacheControl: string;
}

/** What `npm run build` wrote, or undefined when it has not run (or wrote no index.html). */
function loadAssets(dir: string): { index: Buffer; files: Map<string, Asset> } | undefined {
  const indexFile = path.join(dir, 'index.html');
  if (!existsSync(indexFile)) return undefined;
  const files = new Map<string, Asset>();
  const assetDir = path.join(dir, 'assets');
  const names = existsSync(assetDir)
    ? readdirSync(assetDir, { withFileTypes: true }).filter((entry) => entry.isFile())
    : [];
  for (const { name } of names) {
    const contentType = CONTENT_TYPES[path.extname(name)];
    if (contentType === undefined) continue;
    files.set(name, {
      body: readFileSync(path.join(assetDir, name)),
      contentType,
      cacheControl: HASHED_NAME_RE.test(name) ? 'public, max-age=31536000, immutable' : 'no-cache',
    });
  }
  return { index: readFileSync(indexFile), files };
}

const NOT_BUILT =
  'The vendor portal has not been built: run `npm run build` (it writes dist/portal/), then restart Hookline.\n';

/**
 * `GET /portal/` (the app; `/portal` redirects there) and `GET /portal/assets/:file`, from `dir`.
 * When `dir` holds no build, both answer 503 saying how to build it. Hidden from the OpenAPI
 * document: they serve a page, not the API.
 */
export function portalAssets(deps: { dir: string; logger: Logger }): FastifyPluginAsync {
  const assets = loadAssets(deps.dir);
  if (!assets)
    deps.logger.warn(
      { dir: deps.dir },
      'vendor portal not built: /portal/ answers 503 until `npm run build` writes it',
    );
  const hide = { schema: { hide: true } };
  return async (app) => {
    // A relative link from /portal would resolve against /, so the page lives under /portal/ only.
    // The redirect keeps the link's fragment (the one-time token): browsers carry it over.
    app.get('/portal', hide, async (_request, reply) => reply.redirect('/portal/', 301));

    app.get('/portal/', hide, async (_request, reply) => {
      if (!assets) return reply.code(503).type('text/plain; charset=utf-8').send(NOT_BUILT);
      // Never cached: it names the current build's assets, and a stale copy would load old ones.
      return reply.type('text/html; charset=utf-8').header('cache-control', 'no-store').send(assets.index);
    });

    app.get<{ Params: { file: string } }>('/portal/assets/:file', hide, async (request, reply) => {
      if (!assets) return reply.code(503).type('text/plain; charset=utf-8').send(NOT_BUILT);
      const asset = assets.files.get(request.params.file);
      if (!asset) return reply.code(404).send(errorBody('route_not_found'));
      return reply.type(asset.contentType).header('cache-control', asset.cacheControl).send(asset.body);
    });
  };
}
