import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { capturedLogs } from '../helpers/logs.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-cancel';
const logs = capturedLogs();
const LETTERS = 60;

describe('cancelling a bulk replay (real Redis, a real receiver, a worker)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let webhook: { id: string; key: string };

  beforeAll(async () => {
    // One attempt: every failed delivery is a dead letter at once.
    t = await testApp({ retryScheduleMs: [0], logger: logs.logger() });
    receiver = new TestReceiver();
    await receiver.start();
    worker = await startTestWorker(t, { breaker: { failureThreshold: 10_000, openMs: 100, openMsMax: 100 } });
    receiver.script('/hook', { status: 500 });
    webhook = await t.register(VENDOR, `${receiver.base}/hook`);
    await t.ingestor.ingest(
      Array.from({ length: LETTERS }, () => machineEvent(VENDOR)),
      'http',
    );
    await waitFor(
      async () => (await t.deliveryLog.deadLetterCount(webhook.id)) === LETTERS,
      15_000,
      `${LETTERS} dead letters`,
    );
    await queuesDrained(t.queues, 10_000);
    receiver.script('/hook', { status: 200 });
  });
  afterAll(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  const api = (method: 'GET' | 'POST', url: string, key = webhook.key) =>
    t.app.inject({ method, url, headers: { 'x-api-key': key } });

  it('stops the run between pages: what was queued is delivered, the rest stay dead letters, and the task ends saying so', async () => {
    const otherKey = await t.keyFor(['vendor'], 'someone-else');
    const sentBefore = receiver.requests.length;
    const taskId = await t.replayer.createTask(VENDOR, webhook.id);
    const cancels: number[] = [];
    const run = await t.replayer.runReplayAll(taskId, webhook.id, {
      pageSize: 10,
      // After the first page (10 queued), the vendor cancels; another vendor cannot.
      onProgress: async (done) => {
        if (done !== 10) return;
        expect((await api('POST', `/vendors/v1/tasks/${taskId}/cancel`, otherKey)).statusCode).toBe(404);
        const cancel = await api('POST', `/vendors/v1/tasks/${taskId}/cancel`);
        cancels.push(cancel.statusCode);
        expect(cancel.json()).toMatchObject({ task_id: taskId, status: 'in_progress' });
      },
    });
    expect(cancels).toEqual([202]);
    expect(run).toEqual({ replayed: 10, skipped: 0 });

    let task: { status: string; fail_reason: string | null; progress?: object } | undefined;
    await waitFor(
      async () => {
        task = (await api('GET', `/rental/v1/tasks/${taskId}`)).json();
        return task!.status === 'failed';
      },
      15_000,
      'the cancelled task to end',
    );
    expect(task!.fail_reason).toBe(
      `cancelled after 10 of ${LETTERS} dead letters were replayed (10 delivered, 0 failed again); the others stay dead letters`,
    );
    expect(task!.progress).toMatchObject({ delivered: 10, cancelled: true });
    await queuesDrained(t.queues, 10_000);
    expect(receiver.requests.length - sentBefore).toBe(10);
    expect(await t.deliveryLog.deadLetterCount(webhook.id)).toBe(LETTERS - 10);

    // Ended: nothing to cancel.
    const again = await api('POST', `/vendors/v1/tasks/${taskId}/cancel`);
    expect(again.statusCode).toBe(409);
    expect(again.json()).toMatchObject({ code: 'task_finished' });
    expect((await api('POST', '/vendors/v1/tasks/not-a-uuid/cancel')).statusCode).toBe(400);
  });

  it('an operator cancels any vendor’s replay (logged with the key); cancelled before it runs, it replays nothing', async () => {
    const adminKey = await t.keyFor(['admin']);
    const left = await t.deliveryLog.deadLetterCount(webhook.id);
    const taskId = await t.replayer.createTask(VENDOR, webhook.id);
    const cancel = await api('POST', `/admin/v1/tasks/${taskId}/cancel`, adminKey);
    expect(cancel.statusCode).toBe(202);
    expect(cancel.json()).toMatchObject({ task_id: taskId, status: 'pending' });
    const logged = logs.lines.find((line) => line.event === 'operator.replay_cancelled' && line.taskId === taskId);
    expect(typeof logged?.keyId).toBe('string');
    expect(await t.replayer.runReplayAll(taskId, webhook.id)).toEqual({ replayed: 0, skipped: 0 });
    await waitFor(
      async () => (await api('GET', `/rental/v1/tasks/${taskId}`)).json<{ status: string }>().status === 'failed',
      10_000,
      'the cancelled task to end',
    );
    expect((await api('GET', `/rental/v1/tasks/${taskId}`)).json()).toMatchObject({
      fail_reason: `cancelled after 0 of ${left} dead letters were replayed (0 delivered, 0 failed again); the others stay dead letters`,
    });
    expect(await t.deliveryLog.deadLetterCount(webhook.id)).toBe(left);
    expect((await api('POST', `/admin/v1/tasks/${taskId}/cancel`, adminKey)).statusCode).toBe(409);
  });
});
