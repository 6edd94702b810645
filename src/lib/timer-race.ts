/**
 * A promise raced against a timer, which shutdown steps, pings and pool closes all need: wait for
 * some work, but not for longer than a bound.
 */

/**
 * Settles as `work` does, or resolves to `timedOut` once `ms` have passed first. The timer is
 * cleared as soon as either happens, so a finished race keeps nothing pending in the event loop.
 * `work` itself goes on (a caller that must stop it does so on `timedOut`).
 */
export async function raceTimer<T, F>(work: Promise<T>, ms: number, timedOut: F): Promise<T | F> {
  let timer: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([work, new Promise<F>((resolve) => (timer = setTimeout(resolve, ms, timedOut)))]);
  } finally {
    clearTimeout(timer);
  }
}

/**
 * Waits `ms`, or less when the `wake` handed to `register` is called (a loop that sleeps between
 * checks unless something changes first): true when woken, false when the time ran out. The timer
 * is cleared when woken; waking after the time ran out does nothing.
 */
export function wakeableSleep(ms: number, register: (wake: () => void) => void): Promise<boolean> {
  return new Promise<boolean>((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    register(() => {
      clearTimeout(timer);
      resolve(true);
    });
  });
}
