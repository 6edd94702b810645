import { z } from 'zod';
import { ERRORS, type ErrorCode } from './errors.js';

/** The error body every route documents. */
export const errorSchema = z
  .object({
    error: z.string().describe('Human-readable message.'),
    code: z.enum(Object.keys(ERRORS) as [ErrorCode, ...ErrorCode[]]).describe('Stable machine-readable code.'),
  })
  .meta({ id: 'Error' });

/** Response schemas for the error statuses a route can answer. */
export function errorResponses<const S extends number>(...statuses: S[]): Record<S, typeof errorSchema> {
  return Object.fromEntries(statuses.map((s) => [s, errorSchema])) as Record<S, typeof errorSchema>;
}
