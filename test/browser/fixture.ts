import { randomUUID } from 'node:crypto';
import { expect, inject } from 'vitest';
import type { WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { agent, machine } from '../helpers/ingest-app.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

/** What a hostile receiver answers: markup that would run script if the portal rendered it as HTML. */
export const HOSTILE_BODY = '<img src=x onerror="window.__pwned=1">';

export const VENDOR = 'acme-gpu';
const OTHER_VENDOR = 'other-vendor';
export const SECRET = `whsec_${Buffer.from('portal-test-secret-0123456789abcdef').toString('base64')}`;

/**
 * A vendor's world for the portal, over real Redis, a real worker and real receivers on 127.0.0.1,
 * with the API listening on a real port for the browser:
 * - `machineCreated` → the healthy receiver (a secret, delivered events);
 * - `deploymentStopped` → the failing receiver, which answers 500 with HOSTILE_BODY: one attempt
 *   (the retry schedule is a single attempt) makes each event a dead letter;
 * - `machineRemoved` → a receiver that answered 410, so the engine disabled it (reason gone);
 * - another vendor's webhook, which the vendor's pages must never show.
 */
export interface PortalWorld {
  t: TestApp;
  worker: TestWorker;
  good: TestReceiver;
  bad: TestReceiver;
  /** The API's address, e.g. `http://127.0.0.1:41234`. */
  baseUrl: string;
  vendorKey: string;
  adminKey: string;
  webhooks: { machineCreated: string; deploymentStopped: string; machineRemoved: string; other: string };
  /** Ingests events of `eventType` for `vendor` and waits until every delivery has settled. */
  ingest(eventType: WebhookEventType, count?: number, vendor?: string): Promise<void>;
  close(): Promise<void>;
}

export async function portalWorld(): Promise<PortalWorld> {
  const t = await testApp({ portalAssetsDir: inject('portalDir'), retryScheduleMs: [0] });
  const good = new TestReceiver();
  const bad = new TestReceiver();
  await good.start();
  await bad.start();
  bad.script('/deployments', { status: 500, headers: { 'content-type': 'text/html' }, body: HOSTILE_BODY });
  good.script('/removed', { status: 410 });
  // Every attempt reaches its receiver: circuits are the breaker tests' subject, not the portal's.
  const worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000 } });
  const baseUrl = await t.app.listen({ host: '127.0.0.1', port: 0 });
  const vendorKey = await t.keyFor(['vendor'], VENDOR);
  const otherKey = await t.keyFor(['vendor'], OTHER_VENDOR);
  const adminKey = await t.keyFor(['admin']);
  const eventsKey = await t.keyFor(['events:write']);

  const register = async (key: string, eventType: WebhookEventType, url: string, secret?: string) => {
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: eventType, callback_url: url, ...(secret ? { secret } : {}) },
    });
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  };
  const webhooks = {
    machineCreated: await register(vendorKey, 'EVENT_TYPE_MACHINE_CREATED', `${good.base}/machines`, SECRET),
    deploymentStopped: await register(vendorKey, 'EVENT_TYPE_DEPLOYMENT_STOPPED', `${bad.base}/deployments`, SECRET),
    machineRemoved: await register(vendorKey, 'EVENT_TYPE_MACHINE_REMOVED', `${good.base}/removed`),
    other: await register(otherKey, 'EVENT_TYPE_MACHINE_CREATED', `${good.base}/other-vendor-hook`),
  };

  const ingest = async (eventType: WebhookEventType, count = 1, vendor = VENDOR) => {
    const events = Array.from({ length: count }, () => {
      const id = randomUUID().slice(0, 8);
      const data = eventType.startsWith('EVENT_TYPE_MACHINE')
        ? eventType === 'EVENT_TYPE_MACHINE_REMOVED'
          ? { metadata: { machine_id: `m-${id}` } }
          : machine(`m-${id}`)
        : agent(`dep-${id}`, 'STATUS_FAILED', 'container exited with code 137');
      return { event_type: eventType, vendor_id: vendor, data };
    });
    const res = await t.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': eventsKey },
      payload: { events },
    });
    expect(res.statusCode, res.body).toBe(202);
    await queuesDrained(t.queues);
    await statsSettled();
  };

  /**
   * Workers flush their stats counts about once a second: the pages show health from them, so a
   * test looks only once every attempt the delivery log holds is counted in its webhook's stats.
   */
  const statsSettled = () =>
    waitFor(
      async () => {
        for (const webhookId of [webhooks.machineCreated, webhooks.deploymentStopped, webhooks.machineRemoved]) {
          const deliveries = await t.deliveryLog.recent(webhookId, 1_000);
          const attempted = deliveries.reduce(
            (sum, d) => sum + (d.lastOutcome === 'webhook_disabled' ? 0 : d.attempts),
            0,
          );
          if ((await t.endpointStats.read(webhookId, Date.now())).hour.attempts !== attempted) return false;
        }
        return true;
      },
      10_000,
      'every attempt counted in its webhook’s stats',
    );

  // The 410 disables its webhook at once; the other vendor's event must not show up anywhere.
  await ingest('EVENT_TYPE_MACHINE_REMOVED');
  await waitFor(
    async () => (await t.webhooks.get(VENDOR, webhooks.machineRemoved))?.disabled !== undefined,
    10_000,
    'the 410 to disable its webhook',
  );
  await ingest('EVENT_TYPE_MACHINE_CREATED', 1, OTHER_VENDOR);

  return {
    t,
    worker,
    good,
    bad,
    baseUrl,
    vendorKey,
    adminKey,
    webhooks,
    ingest,
    async close() {
      await worker.close();
      await good.close();
      await bad.close();
      await t.close();
    },
  };
}
