import { randomUUID } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { useDeliveryWorld } from '../helpers/delivery-world.js';
import { machineEvent } from '../helpers/events.js';
import { waitFor } from '../helpers/wait.js';

const VENDOR = 'vendor-priority';
const BACKLOG = 150;

const deploymentStopped = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED',
  vendor_id: VENDOR,
  data: {
    deployment_id: `d-${randomUUID().slice(0, 8)}`,
    machine_id: 'm-1',
    status: 'STATUS_STOPPED',
    fail_reason: '',
  },
});

describe('priority: a high-priority webhook’s deliveries go first where their endpoint holds deliveries back (real Redis, real receivers)', () => {
  const start = useDeliveryWorld(VENDOR);

  it('a DEPLOYMENT_STOPPED reaches an endpoint taking one request at a time ahead of a backlog of MACHINE_CREATED', async () => {
    const { t, receiver } = await start();
    // One origin, two webhooks: the endpoint (vendor and origin) takes one request at a time, 50 ms each.
    receiver.script('/machines', { status: 200, delayMs: 50 });
    receiver.script('/deployments', { status: 200, delayMs: 50 });
    const machines = await t.register(VENDOR, `${receiver.base}/machines`, { max_concurrency: 1 });
    const deployments = await t.register(VENDOR, `${receiver.base}/deployments`, {
      event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED',
      max_concurrency: 1,
      priority: 'high',
    });
    const shown = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${deployments.id}`,
      headers: { 'x-api-key': deployments.key },
    });
    expect(shown.json<{ priority: string }>().priority).toBe('high');
    expect(machines.id).not.toBe(deployments.id);

    const backlog = Array.from({ length: BACKLOG }, () => machineEvent(VENDOR));
    expect(new Set((await t.ingestor.ingest(backlog, 'http')).map((r) => r.status))).toEqual(new Set(['accepted']));
    const atMachines = () => receiver.requests.filter((r) => r.path === '/machines').length;
    await waitFor(() => atMachines() >= 5, 20_000, 'the backlog under way');

    const urgent = deploymentStopped();
    expect((await t.ingestor.ingest([urgent], 'http')).map((r) => r.status)).toEqual(['accepted']);
    const before = atMachines();
    await waitFor(() => receiver.requests.some((r) => r.path === '/deployments'), 20_000, 'the high-priority delivery');
    const passed = atMachines() - before;
    // The attempt in flight, and those sent while the worker read the new event's batch (50 ms
    // each), went first; not the backlog behind them (about 100 without priority).
    expect(passed).toBeLessThanOrEqual(10);
    expect(atMachines()).toBeLessThan(BACKLOG / 2);
  });

  it('is set and shown through the API: high or normal, anything else refused', async () => {
    const { t, receiver } = await start();
    const webhook = await t.register(VENDOR, `${receiver.base}/in`);
    const patch = (payload: object) =>
      t.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhook.id}`,
        headers: { 'x-api-key': webhook.key },
        payload,
      });
    const read = async () =>
      (
        await t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${webhook.id}`,
          headers: { 'x-api-key': webhook.key },
        })
      ).json<{ priority: string }>().priority;
    expect(await read()).toBe('normal');
    expect((await patch({ priority: 'high' })).statusCode).toBe(200);
    expect(await read()).toBe('high');
    const refused = await patch({ priority: 'urgent' });
    expect(refused.statusCode).toBe(400);
    expect(refused.json<{ error: string }>().error).toContain('priority must be "high" or "normal"');
    expect((await patch({ priority: 'normal' })).statusCode).toBe(200);
    expect(await read()).toBe('normal');
  });
});
