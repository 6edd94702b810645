import type { RedisKeys } from './keys.js';
import { endpointDigest } from './endpoints.js';
import type { Redis } from './redis.js';

/** One worker's concurrency limit of an endpoint and its attempts in flight there. */
export interface WorkerFlow {
  limit: number;
  inflight: number;
}

/** An endpoint's flow control over all workers, for the stats endpoint. */
export interface SharedFlow {
  /** The workers that sent to the endpoint lately, each with its own limit. */
  workers: WorkerFlow[];
  pausedUntilMs: number | undefined;
}

/** How long a worker's reported limit counts after its last report (it reports changes every second). */
const REPORT_TTL_MS = 60_000;

/**
 * What workers share about receiver endpoints' flow control. A pause (a receiver's Retry-After)
 * is one key per endpoint expiring with the pause, read by a worker when it first meets the
 * endpoint, and published so workers that know the endpoint already hold it back at once: the
 * delivery hot path makes no round trip for it. Each worker's AIMD limit is its own (in memory);
 * it writes the limits that changed once a second, for the stats endpoint only.
 */
export class RedisEndpointFlow {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'endpointFlow'>,
  ) {}

  /** Pauses `endpoint` for every worker until `untilMs` (a longer pause already set stays). */
  async pause(endpoint: string, untilMs: number, nowMs: number): Promise<void> {
    const key = this.keys.endpointFlow.pause(endpointDigest(endpoint));
    const current = Number((await this.redis.get(key)) ?? 0);
    if (current >= untilMs) return;
    await Promise.all([
      this.redis.set(key, String(untilMs), 'PX', Math.max(1, untilMs - nowMs)),
      this.redis.publish(this.keys.endpointFlow.pauses, JSON.stringify({ endpoint, untilMs })),
    ]);
  }

  /** Until when `endpoint` is paused; undefined: it is not. */
  async pausedUntil(endpoint: string): Promise<number | undefined> {
    const value = await this.redis.get(this.keys.endpointFlow.pause(endpointDigest(endpoint)));
    return value === null ? undefined : Number(value);
  }

  /**
   * Listens for pauses until `signal` aborts; resolves once subscribed. Uses a connection of its own
   * (a subscribed connection can do nothing else).
   */
  async listen(onPause: (endpoint: string, untilMs: number) => void, signal: AbortSignal): Promise<void> {
    const subscriber = this.redis.duplicate();
    subscriber.on('error', () => undefined);
    signal.addEventListener('abort', () => subscriber.disconnect(), { once: true });
    subscriber.on('message', (_channel: string, message: string) => {
      try {
        const { endpoint, untilMs } = JSON.parse(message) as { endpoint: unknown; untilMs: unknown };
        if (typeof endpoint === 'string' && typeof untilMs === 'number') onPause(endpoint, untilMs);
      } catch {
        // Not a message this version understands: skip it.
      }
    });
    await subscriber.subscribe(this.keys.endpointFlow.pauses);
  }

  /** Writes this worker's limits of the endpoints whose limit changed (one command per endpoint, auto-pipelined). */
  async report(workerId: string, flows: ReadonlyMap<string, WorkerFlow>): Promise<void> {
    await Promise.all(
      [...flows].map(([endpoint, flow]) => {
        const key = this.keys.endpointFlow.limits(endpointDigest(endpoint));
        return this.redis.multi().hset(key, workerId, JSON.stringify(flow)).pexpire(key, REPORT_TTL_MS).exec();
      }),
    );
  }

  /** The endpoint's pause and the limits workers reported in the last minute. */
  async read(endpoint: string): Promise<SharedFlow> {
    const digest = endpointDigest(endpoint);
    const [pause, limits] = await Promise.all([
      this.redis.get(this.keys.endpointFlow.pause(digest)),
      this.redis.hgetall(this.keys.endpointFlow.limits(digest)),
    ]);
    return {
      workers: Object.values(limits).map((json) => JSON.parse(json) as WorkerFlow),
      pausedUntilMs: pause === null ? undefined : Number(pause),
    };
  }
}
