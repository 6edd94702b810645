import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { TestReceiver } from '../helpers/receiver.js';
import { storedText } from '../helpers/redis-dump.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-copies';

describe('no copy of a payload stays in the queues once its delivery is done', () => {
  let t: TestApp;
  let worker: TestWorker;
  let receiver: TestReceiver;
  beforeAll(async () => {
    t = await testApp({ retryScheduleMs: [0, 100, 100] });
    receiver = new TestReceiver();
    await receiver.start();
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000, openMs: 100, openMsMax: 100 } });
  });
  afterAll(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  it('first attempts, retries as single jobs and their completions leave no body behind (BullMQ keeps no return value)', async () => {
    await t.register(VENDOR, `${receiver.base}/hook`);
    // The second attempt of every delivery is a single job: its completion is what BullMQ records.
    receiver.script('/hook', { status: 500 }, { status: 200 });
    const markers = Array.from({ length: 3 }, () => `marker-${randomUUID()}`);
    for (const marker of markers) {
      const results = await t.ingestor.ingest(
        [
          {
            event_id: randomUUID(),
            event_type: 'EVENT_TYPE_MACHINE_CREATED',
            vendor_id: VENDOR,
            data: { status: 'available', metadata: { machine_id: `m-${marker}`, note: marker } },
          },
        ],
        'http',
      );
      expect(results[0]!.status).not.toBe('rejected');
      await waitFor(
        () => receiver.requests.filter((r) => r.body.includes(marker)).length >= 2,
        10_000,
        'a retried delivery',
      );
      receiver.script('/hook', { status: 500 }, { status: 200 });
    }
    await queuesDrained(t.queues, 10_000);
    // Every value under the delivery queues' keys (`{P:q<n>}…`: streams, jobs, BullMQ's events).
    const contents = await storedText(t.redis, `{${t.prefix}:q*`);
    // The queues did hold work (BullMQ's events stream of the retries names their jobs).
    expect(contents).toContain('completed');
    for (const marker of markers) expect(contents).not.toContain(marker);
  });
});
