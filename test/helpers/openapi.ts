import type { AdminServer } from '../../src/admin/server.js';

interface OpenApiResponse {
  description: string;
  headers?: Record<string, { description?: string; schema: object }>;
  content?: Record<string, { schema: object; examples?: Record<string, { summary?: string; value: unknown }> }>;
}

interface OpenApiParameter {
  name: string;
  in: string;
  required?: boolean;
  description?: string;
  schema: object;
}

export interface OpenApiOperation {
  operationId?: string;
  summary?: string;
  description?: string;
  tags?: string[];
  security?: unknown[];
  parameters?: OpenApiParameter[];
  requestBody?: { required?: boolean; content: Record<string, { schema: object }> };
  responses: Record<string, OpenApiResponse>;
}

export interface OpenApiDocument {
  openapi: string;
  info: { title: string; version: string; license?: { name: string; identifier?: string }; contact?: object };
  servers?: { url: string }[];
  tags?: { name: string; description?: string }[];
  paths: Record<string, Record<string, OpenApiOperation>>;
  webhooks?: Record<string, Record<string, OpenApiOperation>>;
  components: { schemas: Record<string, object>; securitySchemes: Record<string, unknown> };
}

/** The OpenAPI document as the admin API serves it at /openapi.json. */
export async function servedDocument(app: AdminServer): Promise<OpenApiDocument> {
  const res = await app.inject({ method: 'GET', url: '/openapi.json' });
  if (res.statusCode !== 200) throw new Error(`/openapi.json answered ${res.statusCode}: ${res.body}`);
  return res.json<OpenApiDocument>();
}

/** Every operation of the document's paths, as `METHOD /path` and the operation. */
export function operationsOf(doc: OpenApiDocument): [string, OpenApiOperation][] {
  return Object.entries(doc.paths).flatMap(([path, item]) =>
    Object.entries(item).map(([method, op]): [string, OpenApiOperation] => [`${method.toUpperCase()} ${path}`, op]),
  );
}

/** A route the server really has: its method and Fastify path (`/vendors/v1/webhooks/:webhook_id`). */
export interface ServedRoute {
  method: string;
  url: string;
}

/**
 * Every route the server has, hidden ones (the portal's page, /docs, /metrics) included, read from
 * Fastify's own route tree (printRoutes), so a route added tomorrow is in the list without anyone
 * writing it down. HEAD twins of GET routes are left out. The tree prints a wildcard without the
 * static part before it (`/docs/static/*` as a `*` beside `static/index.html`), so a wildcard takes
 * the folder of a sibling when that is the route the server has; every route is checked with hasRoute.
 */
export function servedRoutes(app: AdminServer): ServedRoute[] {
  const parents: string[] = [];
  const siblings: string[][] = [];
  const routes: ServedRoute[] = [];
  for (const line of app.printRoutes({ commonPrefix: false }).split('\n')) {
    const match = /^((?:[│ ] {3})*)[├└]── (.+) \(([A-Z, ]+)\)$/.exec(line);
    if (!match) continue;
    const depth = match[1]!.length / 4;
    const segment = match[2]!;
    const parent = parents[depth - 1] ?? '';
    // A line at this depth ends the lists of deeper levels: their parent is done.
    siblings.length = depth + 1;
    const mine = (siblings[depth] ??= []);
    const folders = segment === '*' ? mine.map((name) => name.slice(0, name.lastIndexOf('/') + 1)) : [];
    const candidates = [segment, ...folders.map((folder) => `${folder}${segment}`)].map((rest) =>
      `${parent}${rest}`.replace(/(?<!^)\/\//g, '/'),
    );
    const methods = match[3]!.split(', ').filter((method) => method !== 'HEAD');
    const url = candidates.find((candidate) => methods.every((method) => app.hasRoute({ method, url: candidate })));
    if (url === undefined) throw new Error(`printRoutes names ${candidates[0]}, which the server does not have`);
    parents[depth] = url;
    mine.push(segment);
    for (const method of methods) routes.push({ method, url });
  }
  if (routes.length < 30) throw new Error(`printRoutes changed its format: read only ${routes.length} routes`);
  return routes;
}
