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
