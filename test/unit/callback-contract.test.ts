import { describe, expect, it } from 'vitest';
import { deliveryHeadersSchema, RECEIVER_ANSWERS } from '../../src/delivery/callback-contract.js';
import { decide } from '../../src/delivery/classify.js';
import { interpret } from '../../src/delivery/interpret.js';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';

const SCHEDULE_MS = [0, 5_000, 300_000];
const RETRY_AFTER_S = 7;

/** Statuses each documented answer stands for; `default` covers every status no other entry names. */
const SAMPLES: Record<string, number[]> = {
  '2XX': [200, 201, 204, 299],
  '410': [410],
  '429': [429],
  '503': [503],
  default: [301, 302, 400, 404, 408, 500, 502, 504],
};

const decided = (status: number, retryAfter?: string) =>
  decide({
    answer: interpret({ kind: 'response', status, retryAfter, bodySnippet: '', durationMs: 5 }, 0),
    attemptsMade: 1,
    scheduleMs: SCHEDULE_MS,
    random: () => 0.5,
  });

describe('RECEIVER_ANSWERS (the webhooks section’s responses) say what decide does', () => {
  it('names every sampled answer once', () => {
    expect(RECEIVER_ANSWERS.map((a) => a.status).sort()).toEqual(Object.keys(SAMPLES).sort());
  });

  it.each(RECEIVER_ANSWERS.map((answer) => [answer.status, answer] as const))('%s', (_status, answer) => {
    for (const status of SAMPLES[answer.status] ?? []) {
      const decision = decided(status, String(RETRY_AFTER_S));
      expect(decision.action, `HTTP ${status}`).toBe(answer.action);
      // Retry-After sets the delay exactly where the document says it is honoured; elsewhere the
      // schedule's jittered 5 s applies.
      if (decision.action === 'retry')
        expect(decision.delayMs, `HTTP ${status}`).toBe(answer.honoursRetryAfter ? RETRY_AFTER_S * 1_000 : 5_000);
    }
  });
});

describe('deliveryHeadersSchema (the webhooks section’s header parameters)', () => {
  const EVENT_ID = '0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d';
  const headersOf = (secrets: string[]) => ({
    ...signatureHeaders({ webhookId: EVENT_ID, timestampSec: 1_714_564_800, body: '{"x":1}', secrets }),
    'x-webhook-event': 'EVENT_TYPE_MACHINE_CREATED',
    'x-webhook-attempt': '3',
    'user-agent': 'Hookline/0.1.0',
  });

  it('accepts the signed headers with one secret, two (a rotation) and none', () => {
    const schema = deliveryHeadersSchema('EVENT_TYPE_MACHINE_CREATED').strict();
    expect(
      schema.safeParse(headersOf(['whsec_MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY=', 'plain secret'])).error,
    ).toBeUndefined();
    expect(schema.safeParse(headersOf(['plain secret'])).error).toBeUndefined();
    expect(schema.safeParse(headersOf([])).error).toBeUndefined();
  });

  it('refuses another event type, an attempt 0 and a malformed signature', () => {
    const schema = deliveryHeadersSchema('EVENT_TYPE_MACHINE_CREATED');
    const good = headersOf(['s']);
    expect(schema.safeParse({ ...good, 'x-webhook-event': 'EVENT_TYPE_MACHINE_REMOVED' }).success).toBe(false);
    expect(schema.safeParse({ ...good, 'x-webhook-attempt': '0' }).success).toBe(false);
    expect(schema.safeParse({ ...good, 'webhook-signature': 'v2,abc' }).success).toBe(false);
  });
});
