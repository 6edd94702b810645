import { pino } from 'pino';
import { describe, expect, it } from 'vitest';
import { Lifecycle } from '../../src/engine/lifecycle.js';

/** A lifecycle whose parts write what they do, in order, to `seen`. */
function recorded() {
  const seen: string[] = [];
  const lifecycle = new Lifecycle(pino({ level: 'silent' }));
  const part = (name: string, phase: 'foundation' | 'serving' | 'work' | 'intake', extra = {}) =>
    lifecycle.add({
      name,
      phase,
      start: () => void seen.push(`start ${name}`),
      stop: ({ started }) => void seen.push(`stop ${name}${started ? '' : ' (never started)'}`),
      ...extra,
    });
  return { seen, lifecycle, part };
}

describe('Lifecycle', () => {
  it('starts phase by phase in order of adding, and stops the entrances first and the rest in the reverse', async () => {
    const { seen, lifecycle, part } = recorded();
    part('worker', 'work');
    part('projector', 'intake');
    part('api', 'serving', { stopsFirst: true });
    part('connections', 'foundation');
    part('health', 'serving');
    part('stats', 'work');
    await lifecycle.start();
    expect(seen.splice(0)).toEqual([
      'start connections',
      'start api',
      'start health',
      'start worker',
      'start stats',
      'start projector',
    ]);
    expect(await lifecycle.close(0)).toBe('drained');
    expect(seen).toEqual([
      'stop api',
      'stop projector',
      'stop stats',
      'stop worker',
      'stop health',
      'stop connections',
    ]);
  });

  it('stops every part after a start that failed, telling each whether it started', async () => {
    const { seen, lifecycle, part } = recorded();
    part('health', 'serving', {
      start: () => Promise.reject(new Error('port in use')),
    });
    part('worker', 'work');
    await expect(lifecycle.start()).rejects.toThrow('port in use');
    await lifecycle.close(0);
    expect(seen).toEqual(['stop worker (never started)', 'stop health']);
  });

  it("answers 'forced' when a stop that bounds itself says so, and bounds every other stop to a step", async () => {
    const lifecycle = new Lifecycle(pino({ level: 'silent' }));
    lifecycle.add({ name: 'stuck', phase: 'foundation', stop: () => new Promise(() => undefined) });
    lifecycle.add({ name: 'worker', phase: 'work', boundsItself: true, stop: () => Promise.resolve('forced') });
    const startedMs = Date.now();
    expect(await lifecycle.close(0)).toBe('forced');
    expect(Date.now() - startedMs).toBeLessThan(2_000);
  });

  it('runs a start that waits for Redis at once, and aborts the signal it gave the starts when shutdown begins', async () => {
    const lifecycle = new Lifecycle(pino({ level: 'silent' }));
    let stopping: AbortSignal | undefined;
    let tries = 0;
    lifecycle.add({
      name: 'feed',
      phase: 'foundation',
      start: (starting) => {
        stopping = starting.stopping;
        starting.whenRedisAnswers(() => {
          tries += 1;
          return Promise.reject(new Error('NOAUTH'));
        });
      },
    });
    await lifecycle.start();
    expect(tries).toBe(1);
    expect(stopping?.aborted).toBe(false);
    await lifecycle.close(0);
    expect(stopping?.aborted).toBe(true);
  });
});
