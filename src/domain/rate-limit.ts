/**
 * A webhook's send rate limit: never more than `rate` sends in any one second. Sends are counted in
 * 50 ms slots; a send may go when the slots that can hold a send of the last second (the current
 * one and the 20 before it, 1.05 s) hold fewer than `rate`. That window covers every second that
 * ends now, so no window [t, t + 1 s) ever holds more than `rate` sends, however the sends fall;
 * and a send that goes late moves nothing for the sends after it (a schedule of one token per
 * 1/rate s would make the next send wait for the late one). `rate` sends may go at once, then
 * nothing until the second has passed: the limit is per second, not a spacing. Over long spans the
 * rate reached is at least rate ÷ 1.05 (the window's extra slot). src/store/send-rate.ts runs the
 * same steps in Redis, for every worker at once, in whole microseconds, so the arithmetic is exact
 * in JavaScript and in Redis's Lua alike.
 *
 * A refused send is told when to come back. Refused sends queue up behind each other (`deferUs`, the
 * end of that line, grows by one place, 1.05 s ÷ rate, per refusal) instead of all coming back for
 * the first free place at once, so a backlog of N costs about N checks, not N per free place. The
 * line reaches at most DEFER_HORIZON_US ahead: beyond it, deliveries come back spread over the
 * second half of the horizon and look again; that also bounds how long a raised or removed limit
 * takes to reach them. The line cannot tell a delivery coming back for its place from a new one:
 * one that finds the window full again is refused again and joins the end of the line (slower,
 * never faster).
 */

/** The largest limit a webhook may set. */
export const RATE_LIMIT_PER_SECOND_MAX = 10_000;

/** How far ahead a refused send is told to come back at most (10 s). */
export const DEFER_HORIZON_US = 10_000_000;

/** The counting slot (50 ms). */
export const SLOT_US = 50_000;
/** Slots before the current one that a send of the last second can be in (1 s ÷ SLOT_US). */
export const WINDOW_SLOTS = 20;

export interface BucketState {
  /** Sends per slot (slot = floor(µs ÷ SLOT_US)), the window's slots only. */
  counts: ReadonlyMap<number, number>;
  /** When the last refused send was told to come back (µs): the end of the line of refused sends. */
  deferUs: number;
}

export type TokenTake =
  | { sent: true; state: BucketState }
  /** `retryInUs`: come back then; the window has room by that time unless others take it first. */
  | { sent: false; retryInUs: number; state: BucketState };

/** Microseconds between places in the line of refused sends at `ratePerSecond` (the window's length ÷ rate, rounded up). */
export function placeUs(ratePerSecond: number): number {
  return Math.ceil(((WINDOW_SLOTS + 1) * SLOT_US) / ratePerSecond);
}

/**
 * Takes one send at `nowUs` for a webhook whose window is in `state` (undefined: never used), or
 * tells when to come back. `random` in [0, 1) spreads the refusals past the horizon.
 */
export function takeSendToken(
  state: BucketState | undefined,
  ratePerSecond: number,
  nowUs: number,
  random: number,
): TokenTake {
  const slot = Math.floor(nowUs / SLOT_US);
  const oldest = slot - WINDOW_SLOTS;
  const counts = new Map<number, number>();
  let total = 0;
  for (const [at, count] of state?.counts ?? []) {
    if (at < oldest) continue;
    counts.set(at, count);
    total += count;
  }
  const deferUs = state?.deferUs ?? 0;
  if (total < ratePerSecond) {
    counts.set(slot, (counts.get(slot) ?? 0) + 1);
    return { sent: true, state: { counts, deferUs } };
  }
  // Room comes when enough of the oldest slots have left the window (slot s leaves it at the start of s + 21).
  let freeAtUs = (slot + 1) * SLOT_US;
  let left = total;
  for (let at = oldest; at <= slot; at += 1) {
    left -= counts.get(at) ?? 0;
    if (left < ratePerSecond) {
      freeAtUs = (at + WINDOW_SLOTS + 1) * SLOT_US;
      break;
    }
  }
  const horizonUs = nowUs + DEFER_HORIZON_US;
  const inLineUs = Math.max(freeAtUs, deferUs);
  if (inLineUs < horizonUs)
    return { sent: false, retryInUs: inLineUs - nowUs, state: { counts, deferUs: inLineUs + placeUs(ratePerSecond) } };
  const spreadUs = Math.floor(DEFER_HORIZON_US / 2 + (random * DEFER_HORIZON_US) / 2);
  return { sent: false, retryInUs: Math.max(freeAtUs - nowUs, spreadUs), state: { counts, deferUs: horizonUs } };
}
