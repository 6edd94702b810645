import { z } from 'zod';
import { ERRORS, type ErrorCode } from './errors.js';

/** The error body every route documents. */
export const errorSchema = z
  .object({
    error: z.string().describe('Human-readable message.'),
    code: z.enum(Object.keys(ERRORS) as [ErrorCode, ...ErrorCode[]]).describe('Stable machine-readable code.'),
    webhook_id: z
      .string()
      .optional()
      .describe('On 409 webhook_conflict at registration: the webhook that already has this event type.'),
  })
  .meta({ id: 'Error' });

/** Response schemas for the error statuses a route can answer. */
export function errorResponses<const S extends number>(...statuses: S[]): Record<S, typeof errorSchema> {
  return Object.fromEntries(statuses.map((s) => [s, errorSchema])) as Record<S, typeof errorSchema>;
}

/** Longest unknown parameter name quoted back in an error. */
const PARAMETER_NAME_QUOTED_MAX = 64;

/**
 * A route's query string: exactly these parameters. Any other answers 400 naming it and the ones
 * the route takes, so a typo (`?state=dead`) is not silently ignored. Routes without parameters use
 * `queryParameters({})`.
 */
export function queryParameters<const S extends z.ZodRawShape>(shape: S) {
  const names = Object.keys(shape);
  const takes = names.length === 0 ? 'this route takes none' : `this route takes ${names.join(', ')}`;
  return z.strictObject(shape, {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown parameter ${issue.keys.map((key) => JSON.stringify(key.length > PARAMETER_NAME_QUOTED_MAX ? `${key.slice(0, PARAMETER_NAME_QUOTED_MAX)}…` : key)).join(', ')} (${takes})`
        : undefined,
  });
}

/** The query string of a route that takes no parameters. */
export const noQueryParameters = queryParameters({});

/** A time the API is given: ISO 8601 with a time zone, as the API answers times; parsed to Unix ms. */
export const isoTime = (name: string) =>
  z
    .string()
    .refine(
      (text) =>
        /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2})$/.test(text) &&
        Number.isFinite(Date.parse(text)),
      { message: `${name} must be an ISO 8601 time with a time zone, e.g. 2026-11-24T10:00:00Z` },
    )
    .transform((text) => Date.parse(text));
