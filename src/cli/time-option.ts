import { parseDurationMs } from '../lib/duration.js';

/** What a time option accepts, as its usage error says it. */
export const TIME_OPTION_FORMS = 'an ISO 8601 time (e.g. 2026-11-24T10:00:00Z) or a time ago (30m, 2h, 3d)';

/**
 * The value of a time option (`--since`, `--until`) in epoch milliseconds: an ISO 8601 date and time,
 * or a duration as configuration writes them (`30m`, `2h`, `3d`) meaning that long before `nowMs`;
 * undefined for anything else. A date without a time is refused: whose midnight it means is a guess.
 */
export function timeOptionMs(text: string, nowMs: number): number | undefined {
  const agoMs = parseDurationMs(text);
  if (agoMs !== undefined) return nowMs - agoMs;
  const ms = Date.parse(text);
  return /^\d{4}-\d{2}-\d{2}T/.test(text) && Number.isFinite(ms) ? ms : undefined;
}
