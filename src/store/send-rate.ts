import { DEFER_HORIZON_US, SLOT_US, WINDOW_SLOTS } from '../domain/rate-limit.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { defineScriptFile, type ScriptCall } from './scripts.js';

/** What the delivery worker needs: a send token for a rate-limited webhook, or when to look again. */
export interface SendRateLimiter {
  /** Takes a token for one send to `webhookId` at `ratePerSecond`; refused: how long to wait (ms, > 0). */
  take(webhookId: string, ratePerSecond: number): Promise<{ sent: true } | { sent: false; retryInMs: number }>;
}

/** The send windows of rate-limited webhooks in Redis, shared by every worker: one script call per send. */
export class RedisSendRate implements SendRateLimiter {
  /** 0 when sent, else the wait in µs. */
  private readonly takeScript: ScriptCall<
    [bucket: string],
    [rate: number, random: number, nowUs: number | '', slotUs: number, windowSlots: number, deferHorizonUs: number],
    number
  >;

  constructor(
    redis: Redis,
    private readonly keys: Pick<RedisKeys, 'deliveries'>,
    private readonly random: () => number = Math.random,
  ) {
    this.takeScript = defineScriptFile(redis, 'send-rate-take', 1);
  }

  async take(webhookId: string, ratePerSecond: number): Promise<{ sent: true } | { sent: false; retryInMs: number }> {
    const waitUs = await this.takeAt(webhookId, ratePerSecond, '');
    return waitUs === 0 ? { sent: true } : { sent: false, retryInMs: Math.ceil(waitUs / 1_000) };
  }

  /** The script's reply (0: sent, else the wait in µs) at `nowUs` instead of Redis's clock: for the conformance test. */
  takeAt(webhookId: string, ratePerSecond: number, nowUs: number | '', random = this.random()): Promise<number> {
    return this.takeScript(
      [this.keys.deliveries.sendRate(webhookId)],
      ratePerSecond,
      random,
      nowUs,
      SLOT_US,
      WINDOW_SLOTS,
      DEFER_HORIZON_US,
    );
  }
}
