/**
 * A webhook's send rate limit: a token bucket that holds `rate` tokens at most (the burst equals the
 * per-second rate) and gains one every 1/rate s; a send takes one. It is kept as its one-number
 * equivalent (GCRA's theoretical arrival time `tatUs`, the time at which the bucket would be full
 * again), in whole microseconds, so the arithmetic is exact in JavaScript and in Redis's Lua alike.
 * src/store/send-rate.ts runs the same steps in Redis, for every worker at once.
 *
 * What it guarantees: from a full bucket, at most `rate` sends at once, then one per 1/rate s; over
 * any window of W seconds at most rate + rate × W sends (the burst plus the refill), so never more
 * than 2 × rate in one second, and rate per second on average over longer spans.
 *
 * A refused send is told when to come back. Refused sends queue up behind each other (`deferUs`, the
 * end of that line, grows by one interval per refusal) instead of all coming back for the first
 * token at once, so a backlog of N costs about N checks, not N per token. The line reaches at most
 * DEFER_HORIZON_US ahead: beyond it, deliveries come back spread over the second half of the
 * horizon and look again; that also bounds how long a raised or removed limit takes to reach them.
 * The line cannot tell a delivery coming back for its place from a new one: one that comes back a
 * moment before its token is refused again and joins the end of the line (slower, never faster).
 */

/** The largest limit a webhook may set. */
export const RATE_LIMIT_PER_SECOND_MAX = 10_000;

/** How far ahead a refused send is told to come back at most (10 s). */
export const DEFER_HORIZON_US = 10_000_000;

export interface BucketState {
  /** When the bucket is full again (µs); at or before now: it is full. */
  tatUs: number;
  /** When the last refused send was told to come back (µs): the end of the line of refused sends. */
  deferUs: number;
}

export type TokenTake =
  | { sent: true; state: BucketState }
  /** `retryInUs`: come back then; a token is due by that time unless others take it first. */
  | { sent: false; retryInUs: number; state: BucketState };

/** Microseconds between tokens at `ratePerSecond`, rounded up so the rate is never exceeded. */
export function intervalUs(ratePerSecond: number): number {
  return Math.ceil(1_000_000 / ratePerSecond);
}

/**
 * Takes one token at `nowUs` from a bucket in `state` (undefined: never used, full), or tells when
 * to come back. `random` in [0, 1) spreads the refusals past the horizon.
 */
export function takeSendToken(state: BucketState | undefined, ratePerSecond: number, nowUs: number, random: number): TokenTake {
  const interval = intervalUs(ratePerSecond);
  // The bucket may be `burst - 1` intervals ahead of now and still hold a token.
  const toleranceUs = interval * (ratePerSecond - 1);
  const tat = Math.max(state?.tatUs ?? nowUs, nowUs);
  const deferUs = state?.deferUs ?? 0;
  if (tat - nowUs <= toleranceUs) return { sent: true, state: { tatUs: tat + interval, deferUs } };
  const tokenAtUs = tat - toleranceUs;
  const horizonUs = nowUs + DEFER_HORIZON_US;
  const inLineUs = Math.max(tokenAtUs, deferUs);
  if (inLineUs < horizonUs) return { sent: false, retryInUs: inLineUs - nowUs, state: { tatUs: tat, deferUs: inLineUs + interval } };
  const spreadUs = Math.floor(DEFER_HORIZON_US / 2 + (random * DEFER_HORIZON_US) / 2);
  return { sent: false, retryInUs: Math.max(tokenAtUs - nowUs, spreadUs), state: { tatUs: tat, deferUs: horizonUs } };
}
