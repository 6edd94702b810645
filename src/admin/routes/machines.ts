import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { machineSchema } from '../../domain/machine.js';
import { parseMachineFilter } from '../../domain/machine-filter.js';
import type { MachineListing } from '../../store/machines.js';
import type { Authorizer } from '../auth.js';
import { ApiError } from '../errors.js';
import { errorResponses, queryParameters } from '../schemas.js';

const PAGE_SIZE_DEFAULT = 20;
const PAGE_SIZE_MAX = 100;
const PAGE_MAX = 1_000_000;

const wholeNumber = (name: string, min: number, max: number) =>
  z
    .string({ error: `${name} must be given once, as a whole number` })
    .regex(/^\d{1,7}$/, `${name} must be a whole number from ${min} to ${max}`)
    .transform(Number)
    .refine((n) => n >= min && n <= max, `${name} must be a whole number from ${min} to ${max}`);

const listingQuery = queryParameters({
  filter: z
    .union([z.string(), z.array(z.string())])
    .optional()
    .describe(
      'Comma-separated name:value conditions, all of which must hold: gpu_name and cpu_name (case-insensitive substring), ' +
        'memory_size and storage_size (≥, in GB, e.g. 24GB), cpu_cores (≥), machine_id and machine_status (alias status) (exact).',
    ),
  page: wholeNumber('page', 1, PAGE_MAX).optional().describe('Page number, from 1 (default 1).'),
  page_size: wholeNumber('page_size', 1, PAGE_SIZE_MAX)
    .optional()
    .describe(`Items per page, 1-${PAGE_SIZE_MAX} (default ${PAGE_SIZE_DEFAULT}).`),
});

const listingResponse = z.object({
  total: z.number().int().describe('Machines matching the query.'),
  current_page: z.number().int(),
  page_size: z.number().int(),
  machines: z.array(machineSchema),
});

/** `GET /rental/v1/machines` (role machines:read): filtered, paginated, ordered by machine id. */
export function machineRoutes(deps: { authorize: Authorizer; machines: MachineListing }): FastifyPluginAsyncZod {
  return async (app) => {
    app.get(
      '/rental/v1/machines',
      {
        onRequest: deps.authorize('machines:read'),
        // The machines were validated when ingested; re-encoding 100 of them through zod on every
        // page would cost more than the whole lookup. The schema still documents the response.
        serializerCompiler: () => (data) => JSON.stringify(data),
        schema: {
          tags: ['rental'],
          summary: 'List machines',
          description:
            'Ordered by machine id. A machine_id condition naming no known machine answers 404; any other query that matches nothing answers an empty page.',
          querystring: listingQuery,
          response: { 200: listingResponse, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request) => {
        const parsed = parseMachineFilter(request.query.filter);
        if (!parsed.ok) throw new ApiError('invalid_filter', parsed.error);
        const page = request.query.page ?? 1;
        const pageSize = request.query.page_size ?? PAGE_SIZE_DEFAULT;
        const result = await deps.machines.list({ filter: parsed.filter, page, pageSize });
        if (result.unknownMachineId) throw new ApiError('machine_not_found');
        return { total: result.total, current_page: page, page_size: pageSize, machines: result.machines };
      },
    );
  };
}
