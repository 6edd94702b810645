/**
 * The tests' one way of waiting: poll a condition until it holds, within a deadline. Tests wait for
 * conditions, never for a fixed time; "nothing more happened" is a condition too (see quiescent).
 */

type Found<T> = Exclude<T, false | undefined | null>;

/**
 * Polls `check` until it answers something other than undefined, null or false, and answers that;
 * undefined when the deadline passed first.
 */
async function poll<T>(check: () => T | Promise<T>, timeoutMs: number, everyMs: number): Promise<Found<T> | undefined> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value !== undefined && value !== null && value !== false) return value as Found<T>;
    if (Date.now() > deadline) return undefined;
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}

/** Waits until `check` holds (answers a value other than undefined, null or false) and answers it; throws after the timeout. */
export async function waitFor<T>(
  check: () => T | Promise<T>,
  timeoutMs = 10_000,
  what = 'condition',
  everyMs = 25,
): Promise<Found<T>> {
  const value = await poll(check, timeoutMs, everyMs);
  if (value === undefined) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
  return value;
}

/** Like waitFor, but answers whether `check` came true in time instead of throwing, so a fault test's summary prints first. */
export async function settles(check: () => boolean | Promise<boolean>, timeoutMs: number): Promise<boolean> {
  return (await poll(check, timeoutMs, 25)) !== undefined;
}

/**
 * Waits until `read()` has kept the same value for `holdMs` (nothing more happened for a hold
 * period) and answers that value; throws when it is still changing after `timeoutMs`.
 */
export async function quiescent<T>(
  read: () => T | Promise<T>,
  holdMs: number,
  timeoutMs = 10_000,
  what = 'quiet',
): Promise<T> {
  let last = await read();
  let sinceMs = Date.now();
  const stable = await poll(
    async () => {
      const now = await read();
      if (!Object.is(now, last)) {
        last = now;
        sinceMs = Date.now();
        return false;
      }
      return Date.now() - sinceMs >= holdMs;
    },
    timeoutMs,
    25,
  );
  if (stable === undefined) throw new Error(`${what}: still changing after ${timeoutMs} ms`);
  return last;
}

/**
 * Waits until the queues (the engine's `queues.counts()`) hold no job waiting, delayed or running;
 * on timeout the error names what was left, so a failure says which jobs stayed.
 */
export async function queuesDrained(
  queues: { counts(): Promise<Record<string, number>> },
  timeoutMs = 10_000,
): Promise<void> {
  let last: Record<string, number> = {};
  const left = (counts: Record<string, number>) =>
    (counts.waiting ?? 0) + (counts.delayed ?? 0) + (counts.active ?? 0) + (counts.prioritized ?? 0);
  const drained = await poll(
    async () => {
      last = await queues.counts();
      return left(last) === 0;
    },
    timeoutMs,
    25,
  );
  if (drained === undefined)
    throw new Error(
      `timed out after ${timeoutMs} ms waiting for the delivery queues to drain; left: ${JSON.stringify(last)}`,
    );
}

/**
 * Waits until the delivery log shows every attempt made: its journal of delivered first attempts
 * (projected every 100 ms by the workers; see store/attempt-journal.ts) holds nothing.
 */
export async function deliveryLogCaughtUp(
  app: {
    redis: { xlen(key: string): Promise<number> };
    keys: { deliveries: { journal(shard: number): string } };
    queues: { partitions: readonly unknown[] };
  },
  timeoutMs = 5_000,
): Promise<void> {
  const shards = Array.from({ length: app.queues.partitions.length }, (_, n) => app.keys.deliveries.journal(n));
  await waitFor(
    async () => (await Promise.all(shards.map((key) => app.redis.xlen(key)))).every((n) => n === 0),
    timeoutMs,
    'the delivery log’s journal to be projected',
  );
}
