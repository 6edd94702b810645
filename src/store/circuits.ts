import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';

/** An open circuit as an operator sees it: a worker holds deliveries to the webhook's endpoint back. */
export interface CircuitView {
  state: 'open' | 'half_open';
  reason: string;
  endpoint: string;
  openedAtMs: number;
  /** When the worker lets a probe through. */
  probeAtMs: number;
}

/** How long a recorded circuit outlives its open period when no worker says it closed (the worker died). */
const STALE_AFTER_MS = 2 * 60_000;

/**
 * Where workers note the circuits they open, per webhook, for the operator views. Breakers live in
 * each worker's memory; this is their shared shadow: written when a circuit opens or half-opens
 * (rare), deleted when it closes, and expiring by itself when no worker says so.
 */
export class RedisCircuitLog {
  constructor(
    private readonly redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
  ) {}

  /** Each webhook's keys live in its own slot: one command each (auto-pipelined), never a cross-slot pipeline. */
  async changed(webhookIds: readonly string[], view: CircuitView | undefined, nowMs: number): Promise<void> {
    const ttlMs = view === undefined ? 0 : Math.max(1, view.probeAtMs - nowMs) + STALE_AFTER_MS;
    await Promise.all(
      webhookIds.map((id) => {
        const key = this.keys.deliveries.circuit(id);
        return view === undefined ? this.redis.del(key) : this.redis.set(key, JSON.stringify(view), 'PX', ttlMs);
      }),
    );
  }

  async of(webhookIds: readonly string[]): Promise<(CircuitView | undefined)[]> {
    const rows = await Promise.all(webhookIds.map((id) => this.redis.get(this.keys.deliveries.circuit(id))));
    return rows.map((json) => (json === null ? undefined : (JSON.parse(json) as CircuitView)));
  }
}
