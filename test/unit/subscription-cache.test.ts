import { describe, expect, it } from 'vitest';
import type { WebhookEventType } from '../../src/domain/events.js';
import type { Subscription, SubscriptionLookup } from '../../src/ingest/ingest.js';
import { CachedSubscriptions } from '../../src/ingest/subscriptions.js';

type Pair = { vendorId: string; eventType: WebhookEventType };
const CREATED: WebhookEventType = 'EVENT_TYPE_MACHINE_CREATED';
const UPDATED: WebhookEventType = 'EVENT_TYPE_MACHINE_UPDATED';

/** A registry that counts what it is asked and can hold a read until released. */
class CountingRegistry implements SubscriptionLookup {
  readonly webhooks = new Map<string, Subscription>();
  readonly asked: Pair[][] = [];
  hold = false;
  private held: (() => void)[] = [];

  async matchMany(pairs: readonly Pair[]): Promise<(Subscription | undefined)[]> {
    this.asked.push([...pairs]);
    const answers = pairs.map((p) => this.webhooks.get(`${p.vendorId}/${p.eventType}`));
    if (this.hold) await new Promise<void>((resolve) => this.held.push(resolve));
    return answers;
  }

  release(): void {
    for (const resolve of this.held.splice(0)) resolve();
  }
}

describe('CachedSubscriptions', () => {
  it('answers known pairs from memory, "no webhook" included, and asks for each unknown pair once per batch', async () => {
    const registry = new CountingRegistry();
    registry.webhooks.set(`v1/${CREATED}`, { webhookId: 'w1', fifo: false });
    const cache = new CachedSubscriptions(
      registry,
      () => 60_000,
      () => 0,
    );
    const batch: Pair[] = [
      { vendorId: 'v1', eventType: CREATED },
      { vendorId: 'v2', eventType: CREATED },
      { vendorId: 'v1', eventType: CREATED },
    ];
    expect(await cache.matchMany(batch)).toEqual([
      { webhookId: 'w1', fifo: false },
      undefined,
      { webhookId: 'w1', fifo: false },
    ]);
    expect(registry.asked).toEqual([[batch[0], batch[1]]]);
    expect(await cache.matchMany(batch)).toEqual([
      { webhookId: 'w1', fifo: false },
      undefined,
      { webhookId: 'w1', fifo: false },
    ]);
    expect(registry.asked).toHaveLength(1);
  });

  it('asks again after the time to live, and at once for a vendor whose webhook changed', async () => {
    let now = 0;
    const registry = new CountingRegistry();
    const cache = new CachedSubscriptions(
      registry,
      () => 1_000,
      () => now,
    );
    const v1 = { vendorId: 'v1', eventType: CREATED };
    const v2 = { vendorId: 'v2', eventType: UPDATED };
    expect(await cache.matchMany([v1, v2])).toEqual([undefined, undefined]);
    // v1 registers a webhook: its answer is dropped; v2's stays.
    registry.webhooks.set(`v1/${CREATED}`, { webhookId: 'w1', fifo: true });
    cache.changed({ webhookId: 'w1', vendorId: 'v1' });
    expect(await cache.matchMany([v1, v2])).toEqual([{ webhookId: 'w1', fifo: true }, undefined]);
    expect(registry.asked.at(-1)).toEqual([v1]);
    // Past the time to live, both are asked again.
    registry.webhooks.set(`v2/${UPDATED}`, { webhookId: 'w2', fifo: false });
    now = 1_001;
    expect(await cache.matchMany([v1, v2])).toEqual([
      { webhookId: 'w1', fifo: true },
      { webhookId: 'w2', fifo: false },
    ]);
    expect(registry.asked.at(-1)).toEqual([v1, v2]);
    // A reset (the feed reconnected) forgets everything.
    cache.reset();
    await cache.matchMany([v2]);
    expect(registry.asked.at(-1)).toEqual([v2]);
  });

  it('never keeps an answer read while a change was heard: it serves that batch only', async () => {
    const registry = new CountingRegistry();
    const cache = new CachedSubscriptions(
      registry,
      () => 60_000,
      () => 0,
    );
    const v1 = { vendorId: 'v1', eventType: CREATED };
    registry.hold = true;
    const stale = cache.matchMany([v1]);
    await Promise.resolve();
    // The webhook is created while the read of "no webhook" is in flight.
    registry.webhooks.set(`v1/${CREATED}`, { webhookId: 'w1', fifo: false });
    cache.changed({ webhookId: 'w1', vendorId: 'v1' });
    registry.hold = false;
    registry.release();
    expect(await stale).toEqual([undefined]);
    expect(await cache.matchMany([v1])).toEqual([{ webhookId: 'w1', fifo: false }]);
    expect(registry.asked).toHaveLength(2);
  });

  it('stays within its size bound', async () => {
    const registry = new CountingRegistry();
    const cache = new CachedSubscriptions(
      registry,
      () => 60_000,
      () => 0,
      100,
    );
    for (let i = 0; i < 1_000; i += 50)
      await cache.matchMany(Array.from({ length: 50 }, (_, j) => ({ vendorId: `v${i + j}`, eventType: CREATED })));
    const before = registry.asked.length;
    // The last batch is still known; the first ones were let go.
    await cache.matchMany(Array.from({ length: 50 }, (_, j) => ({ vendorId: `v${950 + j}`, eventType: CREATED })));
    expect(registry.asked).toHaveLength(before);
    await cache.matchMany([{ vendorId: 'v0', eventType: CREATED }]);
    expect(registry.asked).toHaveLength(before + 1);
  });
});
