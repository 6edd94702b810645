/** What a fault test counts, by event id. */
export interface FaultTally {
  /** Events the engine acknowledged as accepted. */
  accepted: number;
  /** Accepted events the receiver got at least once. */
  delivered: number;
  /** Receptions beyond the first of an event (at-least-once repeats). */
  duplicated: number;
  /** Accepted events the receiver never got. */
  lost: number;
}

/** Counts a run from the accepted event ids and the event id of every reception (`webhook-id`), in order. */
export function tallyDeliveries(accepted: ReadonlySet<string>, receivedEventIds: readonly string[]): FaultTally {
  const received = new Set(receivedEventIds);
  const delivered = [...accepted].filter((id) => received.has(id)).length;
  return {
    accepted: accepted.size,
    delivered,
    duplicated: receivedEventIds.length - received.size,
    lost: accepted.size - delivered,
  };
}

/**
 * Prints the one summary line every fault test ends with, in one form CI logs can be read by:
 * `fault <name>: accepted=N delivered=N duplicated=N lost=N [key=value …] (<seconds> s)`.
 * Tests print it before asserting, so a failed run still says what was lost.
 */
export function reportFault(
  name: string,
  tally: FaultTally,
  startedMs: number,
  extra: Record<string, number | string> = {},
): string {
  const fields = Object.entries({ ...tally, ...extra }).map(([key, value]) => `${key}=${value}`);
  const line = `fault ${name}: ${fields.join(' ')} (${((Date.now() - startedMs) / 1000).toFixed(1)} s)`;
  console.log(line);
  return line;
}
