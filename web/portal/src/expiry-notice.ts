/**
 * The rule of the session expiry warning, apart from timers and the page (expiry.tsx draws it), so it
 * is tested with a fixed clock.
 */

/** How long before a session ends the page warns about it. */
export const EXPIRY_WARNING_MS = 5 * 60_000;

/**
 * What the page says about a session ending at `expiresAtMs`: nothing yet, the time left (whole
 * minutes, then the last minute in 10-second steps, so a screen reader hears a change at most every
 * 10 s), or that it is ending now.
 */
export function expiryNotice(
  expiresAtMs: number,
  nowMs: number,
): { kind: 'none' } | { kind: 'soon'; left: string } | { kind: 'ending' } {
  const leftMs = expiresAtMs - nowMs;
  if (leftMs > EXPIRY_WARNING_MS) return { kind: 'none' };
  if (leftMs <= 0) return { kind: 'ending' };
  return {
    kind: 'soon',
    left: leftMs >= 60_000 ? `${Math.ceil(leftMs / 60_000)} min` : `${Math.ceil(leftMs / 10_000) * 10} s`,
  };
}
