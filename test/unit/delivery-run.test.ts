import pino from 'pino';
import { describe, expect, it } from 'vitest';
import {
  runDelivery,
  type DeliveryProcessorDeps,
  type FinishedOutcome,
  type RunOptions,
  type SendTracker,
} from '../../src/delivery/attempt.js';
import { GIVE_UP_NOW, Lease, type Admitted, type EndpointAnswer } from '../../src/delivery/endpoints/admission.js';
import { DEFAULT_BREAKER_OPTIONS } from '../../src/delivery/endpoints/breaker.js';
import { Endpoint } from '../../src/delivery/endpoints/registry.js';
import type { SendResult } from '../../src/delivery/outbound/http-sender.js';
import { StorageGate } from '../../src/delivery/storage-gate.js';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { Webhook } from '../../src/domain/webhook.js';
import type { AttemptWrite } from '../../src/store/delivery-log.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const NOW = 1_764_000_000_000;
const SCHEDULE_MS = [0, 1_000, 5_000];

const job: DeliverJob = {
  deliveryId: 'd-1',
  eventId: 'e-1',
  eventType: 'EVENT_TYPE_MACHINE_CREATED',
  vendorId: 'v-1',
  webhookId: 'wh-1',
  body: '{"type":"machine.created"}',
  acceptedAtMs: NOW,
};

const options: RunOptions = {
  dueAtMs: NOW,
  epoch: 0,
  giveUp: GIVE_UP_NOW,
  deferJitterMs: 0,
  roomWaitMs: 0,
};

/** What the lease gave back: each answer settled, and how many times it was ended. */
interface Releases {
  answers: EndpointAnswer[];
  ends: number;
}

/**
 * A run's deps over in-memory fakes and a fixed clock: `webhook` is what the lookup finds,
 * `admitted` what admission answers (a lease when 'lease'), `result` what the receiver answers.
 */
function world(setup: { webhook: Webhook | undefined; admitted?: Admitted | 'lease'; result?: SendResult }) {
  const attempts: AttemptWrite[] = [];
  const dropped: DeliverJob[] = [];
  const outcomes: FinishedOutcome[] = [];
  const releases: Releases = { answers: [], ends: 0 };
  const asked = { admissions: 0 };
  const endpoint = new Endpoint('v-1|https://receiver.example', {
    options: DEFAULT_BREAKER_OPTIONS,
    onStateChange: () => undefined,
  });
  const releaser = {
    release: (_lease: Lease, answer: unknown) => {
      if (typeof answer === 'object' && answer !== null) releases.answers.push(answer as EndpointAnswer);
      else releases.ends += 1;
    },
  };
  const deps: DeliveryProcessorDeps = {
    webhooks: { getById: async () => setup.webhook, getFresh: async () => setup.webhook, disable: async () => true },
    sender: {
      send: async () =>
        setup.result ?? { kind: 'response', status: 204, retryAfter: undefined, bodySnippet: '', durationMs: 3 },
      userAgent: 'Hookline/test',
    },
    recorder: {
      recordAttempt: async (write) => {
        attempts.push(write);
        return { failingSinceMs: undefined };
      },
      recordDropped: async (data) => void dropped.push(data),
      progressOf: async () => [],
      recordDeferred: async () => undefined,
    },
    singles: { addSingles: async () => undefined, park: async () => undefined, promote: async () => undefined },
    admission: {
      admit: () => {
        asked.admissions += 1;
        return setup.admitted === 'lease' || setup.admitted === undefined
          ? new Lease(releaser, endpoint, 0, 10)
          : setup.admitted;
      },
    },
    gate: new StorageGate(async () => true, undefined, 60_000),
    wakeups: { register: () => undefined },
    holds: { hold: async () => undefined, release: async () => undefined },
    logger: pino({ level: 'silent' }),
    retryScheduleMs: SCHEDULE_MS,
    deliveryTimeoutMs: 5_000,
    sustainedFailureMs: 60_000,
    batchHoldMs: 2_000,
    suspectHoldMs: 250,
    nowMs: () => NOW,
    random: () => 0.5,
    onOutcome: (outcome) => void outcomes.push(outcome),
  };
  return { deps, attempts, dropped, outcomes, releases, asked, stop: () => deps.gate.stop() };
}

describe('runDelivery: one value for each way a run ends (fixed clock)', () => {
  it('a delivered attempt: concluded, recorded once, the lease settled with the answer and ended once, the tracker told', async () => {
    const w = world({ webhook: webhookFixture(), admitted: 'lease' });
    const told: string[] = [];
    const tracker: SendTracker = {
      started: (_job, suspect) => told.push(`started suspect=${suspect}`),
      ended: () => told.push('ended'),
    };
    const run = await runDelivery(w.deps, job, 1, { ...options, tracker });
    expect(run).toMatchObject({
      kind: 'concluded',
      retryDelayMs: undefined,
      finished: { kind: 'attempted', outcome: 'delivered', decision: 'delivered' },
    });
    expect(w.attempts).toHaveLength(1);
    expect(w.attempts[0]).toMatchObject({
      status: 'delivered',
      attempt: { attempt: 1, atMs: NOW, outcome: 'delivered', statusCode: 204 },
    });
    expect(w.releases.answers).toMatchObject([
      { outcome: 'delivered', health: 'healthy', flow: 'ok', answered: true, retryAfterMs: undefined },
    ]);
    expect(w.releases.ends).toBe(1);
    expect(told).toEqual(['started suspect=false', 'ended']);
    expect(w.outcomes.map((o) => o.kind)).toEqual(['attempted']);
    w.stop();
  });

  it('a failed attempt: concluded with the schedule’s next delay', async () => {
    const w = world({
      webhook: webhookFixture(),
      admitted: 'lease',
      result: { kind: 'response', status: 503, retryAfter: undefined, bodySnippet: '', durationMs: 3 },
    });
    const run = await runDelivery(w.deps, job, 1, options);
    expect(run).toMatchObject({ kind: 'concluded', finished: { outcome: 'http_5xx', decision: 'retry' } });
    expect(run.kind === 'concluded' && run.retryDelayMs).toBeGreaterThan(0);
    expect(w.attempts[0]).toMatchObject({ status: 'retrying' });
    expect(w.releases.ends).toBe(1);
    w.stop();
  });

  it('a deleted webhook: concluded unsent, the delivery dropped, admission never asked', async () => {
    const w = world({ webhook: undefined, admitted: { kind: 'storage' } });
    const run = await runDelivery(w.deps, job, 1, options);
    expect(run).toEqual({ kind: 'concluded', finished: { kind: 'dropped', job }, retryDelayMs: undefined });
    expect(w.dropped).toEqual([job]);
    expect(w.attempts).toEqual([]);
    expect(w.asked.admissions).toBe(0);
    w.stop();
  });

  it('a webhook the engine disabled: concluded, dead-lettered without a request', async () => {
    const w = world({ webhook: webhookFixture({ disabled: { reason: 'gone', atMs: NOW - 1 } }) });
    const run = await runDelivery(w.deps, job, 2, options);
    expect(run).toMatchObject({
      kind: 'concluded',
      finished: { outcome: 'webhook_disabled', decision: 'dead', attempt: 2 },
    });
    expect(w.attempts[0]).toMatchObject({
      status: 'dead',
      attempt: { outcome: 'webhook_disabled', error: 'webhook disabled (gone)' },
    });
    expect(w.releases).toEqual({ answers: [], ends: 0 });
    w.stop();
  });

  it('a webhook paused by its vendor: held to the end of the retry window, nothing recorded', async () => {
    const w = world({ webhook: webhookFixture({ disabled: { reason: 'paused', atMs: NOW - 1 } }) });
    const run = await runDelivery(w.deps, job, 1, options);
    expect(run).toEqual({ kind: 'held', heldUntilMs: expect.any(Number) as number });
    expect(run.kind === 'held' && run.heldUntilMs).toBeGreaterThan(NOW);
    expect(w.attempts).toEqual([]);
    w.stop();
  });

  it('admission’s deferral and storage failure come back as they are, nothing sent or recorded', async () => {
    const deferral: Admitted = {
      kind: 'deferred',
      wakeOn: 'v-1|https://receiver.example',
      retryAtMs: NOW + 30_000,
      reason: 'open',
    };
    for (const admitted of [deferral, { kind: 'storage' } as const]) {
      const w = world({ webhook: webhookFixture(), admitted });
      expect(await runDelivery(w.deps, job, 1, options)).toBe(admitted);
      expect(w.attempts).toEqual([]);
      w.stop();
    }
  });

  it('an attempt due while the circuit is open past its hold: concluded and recorded as circuit_open, unsent', async () => {
    const w = world({ webhook: webhookFixture(), admitted: { kind: 'circuit_open' } });
    const run = await runDelivery(w.deps, job, 1, options);
    expect(run).toMatchObject({ kind: 'concluded', finished: { outcome: 'circuit_open', decision: 'retry' } });
    expect(w.attempts[0]).toMatchObject({ status: 'retrying', attempt: { outcome: 'circuit_open', durationMs: 0 } });
    expect(w.attempts[0]!.attempt.sent).toBeUndefined();
    w.stop();
  });

  it('a send that throws (a bug) still settles and ends the lease, and the error reaches the processor', async () => {
    const w = world({ webhook: webhookFixture(), admitted: 'lease' });
    w.deps.sender.send = () => Promise.reject(new Error('boom'));
    await expect(runDelivery(w.deps, job, 1, options)).rejects.toThrow('boom');
    expect(w.releases).toEqual({
      answers: [{ health: 'failed', flow: 'neutral', retryAfterMs: undefined, answered: false }],
      ends: 1,
    });
    w.stop();
  });
});
