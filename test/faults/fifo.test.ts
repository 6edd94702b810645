import { randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { machineEvent } from '../helpers/events.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { settles, waitFor } from '../helpers/wait.js';
import { workerProcessEnv } from '../helpers/worker.js';

/** A receiver that fails a fifth of the requests at random (500) and records, in order, the event ids it answered 200. */
class FlakyReceiver {
  /** Every request's event id, in arrival order. */
  readonly received: string[] = [];
  /** The event id of every request answered 200, in the order of the answers. */
  readonly succeeded: string[] = [];
  private readonly server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const eventId = String(request.headers['webhook-id']);
      this.received.push(eventId);
      if (Math.random() < 0.2) return void response.writeHead(500).end();
      this.succeeded.push(eventId);
      response.writeHead(200).end();
    });
  });

  async start(): Promise<string> {
    await new Promise<void>((resolve) => this.server.listen(0, '127.0.0.1', resolve));
    return `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
  }

  async close(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

/** Each id once, at its first position. */
const firsts = (ids: readonly string[]) => [...new Set(ids)];

describe('FIFO webhook across worker processes', () => {
  let t: TestApp;
  let receiver: FlakyReceiver;
  const children: { kill(signal: NodeJS.Signals): boolean }[] = [];

  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await receiver.close();
    await t.close();
  });

  it('1,000 events, a receiver failing 20 % at random, two workers, one SIGKILLed mid-run: first successes in strict accept order, none lost', async () => {
    const startedMs = Date.now();
    // Ten attempts 20 ms apart: a failure holds the line for one short retry; dead-lettering
    // (ten failures in a row, 0.2^10) is not expected.
    const SCHEDULE = '0s,20ms,20ms,20ms,20ms,20ms,20ms,20ms,20ms,20ms';
    t = await testApp({ retryScheduleMs: [0, 20, 20, 20, 20, 20, 20, 20, 20, 20], queuePartitions: 2 });
    receiver = new FlakyReceiver();
    const base = await receiver.start();
    const created = await t.webhooks.create('v', { eventType: 'EVENT_TYPE_MACHINE_CREATED', callbackUrl: `${base}/in`, ordering: 'fifo' });
    expect(created.ok).toBe(true);
    // A lock of 2 s and a timeout of 2 s: a killed worker's lease ends within 4 s.
    const env = async () => workerProcessEnv(t, { HOOKLINE_RETRY_SCHEDULE: SCHEDULE, HOOKLINE_DELIVERY_TIMEOUT: '2s' });
    const workers = await Promise.all([1, 2].map(async () => startCli(['worker'], await env(), /delivery worker running/)));
    children.push(...workers.map((w) => w.child));

    // Accept order: ten ingest calls one after another, each in its own order.
    const TOTAL = 1_000;
    const acceptOrder: string[] = [];
    for (let i = 0; i < TOTAL; i += 100) {
      const events = Array.from({ length: 100 }, () => ({ ...machineEvent('v'), event_id: randomUUID() }));
      const results = await t.ingestor.ingest(events, 'http');
      expect(results.every((r) => r.status === 'accepted')).toBe(true);
      acceptOrder.push(...events.map((e) => e.event_id));
    }

    // Kill the worker that is driving the line (the one whose attempts are growing) once a third is through.
    const attemptsOf = (w: (typeof workers)[number]) => w.output().split('"delivery.attempted"').length - 1;
    await waitFor(() => new Set(receiver.succeeded).size >= TOTAL / 3, 40_000, 'a third delivered');
    let counts = workers.map(attemptsOf);
    const victim = await waitFor(
      () => {
        const now = workers.map(attemptsOf);
        const growing = now.findIndex((n, i) => n > counts[i]!);
        counts = now;
        return growing >= 0 ? workers[growing] : undefined;
      },
      10_000,
      'a worker sending',
    );
    victim.child.kill('SIGKILL');
    expect(await victim.exited).toBeNull();
    const atKill = new Set(receiver.succeeded).size;

    await settles(() => new Set(receiver.succeeded).size >= TOTAL, 45_000);
    const accepted = new Set(acceptOrder);
    const tally = tallyDeliveries(accepted, receiver.succeeded);
    const firstSuccesses = firsts(receiver.succeeded);
    // Where the first successes leave accept order (none expected).
    const outOfOrder = firstSuccesses.filter((id, i) => id !== acceptOrder[i]).length;
    const failures = receiver.received.length - receiver.succeeded.length;
    reportFault('fifo-sigkill', tally, startedMs, { delivered_before_kill: atKill, failed_answers: failures, out_of_order: outOfOrder });
    expect(tally.lost, 'every accepted event delivered').toBe(0);
    expect(firstSuccesses, 'first successful receipts in accept order').toEqual(acceptOrder);
    // Retries happened (a fifth fail), and the line went on past them.
    expect(failures).toBeGreaterThan(100);
  }, 120_000);
});
