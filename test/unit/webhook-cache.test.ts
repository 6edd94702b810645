import { describe, expect, it } from 'vitest';
import type { Webhook } from '../../src/domain/webhook.js';
import { CachedWebhookSource } from '../../src/delivery/webhook-cache.js';
import type { WebhookSource } from '../../src/store/webhooks.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const enabled: Webhook = webhookFixture({ id: 'w1', vendorId: 'v' });

/** A registry whose reads can be held until released, to order them around a write. */
class SlowSource implements Pick<WebhookSource, 'getById' | 'disable'> {
  current: Webhook = enabled;
  private held: (() => void)[] = [];
  hold = false;

  async getById(): Promise<Webhook | undefined> {
    const snapshot = this.current;
    if (this.hold) await new Promise<void>((resolve) => this.held.push(resolve));
    return snapshot;
  }

  async disable(_id: string, reason: 'gone' | 'failing'): Promise<boolean> {
    this.current = { ...this.current, disabled: { reason, atMs: 1 } };
    return true;
  }

  release(): void {
    for (const resolve of this.held.splice(0)) resolve();
  }
}

describe('CachedWebhookSource', () => {
  it('serves a webhook from the cache until its time to live ends', async () => {
    let now = 0;
    const source = new SlowSource();
    const cache = new CachedWebhookSource(
      source,
      () => 1_000,
      () => now,
    );
    expect((await cache.getById('w1'))?.disabled).toBeUndefined();
    source.current = { ...enabled, callbackUrl: 'https://receiver.example/new' };
    expect((await cache.getById('w1'))?.callbackUrl).toBe('https://receiver.example/hook');
    now = 1_001;
    expect((await cache.getById('w1'))?.callbackUrl).toBe('https://receiver.example/new');
  });

  it('reads past its copy with getFresh, and keeps what it read (a paused copy must not outlive an enable there)', async () => {
    const source = new SlowSource();
    source.current = { ...enabled, disabled: { reason: 'paused', atMs: 1 } };
    const cache = new CachedWebhookSource(
      source,
      () => 60_000,
      () => 0,
    );
    expect((await cache.getById('w1'))?.disabled?.reason).toBe('paused');
    source.current = enabled;
    expect((await cache.getById('w1'))?.disabled?.reason).toBe('paused');
    expect((await cache.getFresh('w1'))?.disabled).toBeUndefined();
    expect((await cache.getById('w1'))?.disabled).toBeUndefined();
  });

  it('never caches a read that was in flight while the webhook was disabled', async () => {
    const source = new SlowSource();
    const cache = new CachedWebhookSource(
      source,
      () => 60_000,
      () => 0,
    );
    // A read of the still-enabled webhook is in flight when the worker disables it.
    source.hold = true;
    const stale = cache.getById('w1');
    await Promise.resolve();
    source.hold = false;
    expect(await cache.disable('w1', 'failing')).toBe(true);
    source.release();
    expect((await stale)?.disabled).toBeUndefined();
    // The next read goes to the registry and sees it disabled, instead of the stale copy for 60 s.
    expect((await cache.getById('w1'))?.disabled?.reason).toBe('failing');
  });
});
