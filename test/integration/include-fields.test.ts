import { randomUUID } from 'node:crypto';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { useDeliveryWorld } from '../helpers/delivery-world.js';
import { waitFor } from '../helpers/wait.js';

const VENDOR = 'vendor-include-fields';
const WHSEC = `whsec_${Buffer.from('include-fields-secret-of-32-bytes').toString('base64')}`;

/** A machine event with more in its data than a receiver may want. */
const fullEvent = () => ({
  event_id: randomUUID(),
  event_type: 'EVENT_TYPE_MACHINE_CREATED',
  vendor_id: VENDOR,
  data: {
    status: 'available',
    metadata: { machine_id: `m-${randomUUID().slice(0, 8)}`, hostname: 'gpu-node-7', region: 'eu-west' },
    hardware_specs: { gpus: [{ name: 'NVIDIA H100 80GB HBM3' }, { name: 'NVIDIA H100 80GB HBM3' }], cpu_cores: 64 },
    pricing: { per_hour: 2.5, currency: 'USD' },
  },
});

describe('include_fields: a webhook is sent only the paths of data it names, and the identifiers (real Redis, real receivers)', () => {
  const start = useDeliveryWorld(VENDOR);

  it('sends the named paths and the identifiers, signed as sent; the event log keeps what was sent; null sends every field again', async () => {
    const { t, receiver } = await start();
    const webhook = await t.register(VENDOR, `${receiver.base}/in`, {
      secret: WHSEC,
      include_fields: ['data.status', 'data.hardware_specs.gpus', 'data.status'],
    });
    const read = await t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
    });
    // Each path once, in the order given.
    expect(read.json<{ include_fields: unknown }>().include_fields).toEqual([
      'data.status',
      'data.hardware_specs.gpus',
    ]);

    const first = fullEvent();
    expect((await t.ingestor.ingest([first], 'http')).map((r) => r.status)).toEqual(['accepted']);
    await waitFor(() => receiver.requests.length === 1, 10_000, 'the cut delivery');
    const sent = receiver.requests[0]!;
    // The signature covers the body as sent.
    const verified = new StandardWebhook(WHSEC).verify(sent.body, sent.headers as Record<string, string>) as {
      event_id: string;
      data: unknown;
    };
    expect(verified.event_id).toBe(first.event_id);
    expect(verified.data).toEqual({
      status: 'available',
      metadata: { machine_id: first.data.metadata.machine_id },
      hardware_specs: { gpus: first.data.hardware_specs.gpus },
    });
    expect(Object.keys(JSON.parse(sent.body) as object)).toEqual([
      'version',
      'event_id',
      'event_type',
      'timestamp',
      'data',
    ]);
    // The event log (range replays read it) keeps the body as sent.
    const logged = await t.eventLog.page(webhook.id, { limit: 10, withBodies: true });
    expect(logged.events.map((e) => e.body)).toEqual([sent.body]);

    const patched = await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${webhook.id}`,
      headers: { 'x-api-key': webhook.key },
      payload: { include_fields: null },
    });
    expect(patched.statusCode, patched.body).toBe(200);
    const second = fullEvent();
    expect((await t.ingestor.ingest([second], 'http')).map((r) => r.status)).toEqual(['accepted']);
    await waitFor(() => receiver.requests.length === 2, 10_000, 'the whole delivery');
    expect((JSON.parse(receiver.requests[1]!.body) as { data: unknown }).data).toEqual(second.data);
  });

  it('refuses paths outside data, malformed ones and an empty list, naming the one at fault', async () => {
    const { t, receiver } = await start();
    const webhook = await t.register(VENDOR, `${receiver.base}/in`);
    const cases: [unknown, string][] = [
      [['event_type'], 'include_fields[0]: must name a field under data'],
      [['data.status', 'data..x'], 'include_fields[1]:'],
      [[], 'include_fields must name at least one path'],
      ['data.status', 'include_fields must be a list of paths'],
      [[7], 'include_fields[0]: must be a dotted path'],
      [Array.from({ length: 51 }, (_, i) => `data.f${i}`), 'include_fields names at most 50 paths'],
    ];
    for (const [include_fields, message] of cases) {
      const res = await t.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhook.id}`,
        headers: { 'x-api-key': webhook.key },
        payload: { include_fields },
      });
      expect(res.statusCode, JSON.stringify(include_fields)).toBe(400);
      expect(res.json<{ error: string }>().error).toContain(message);
    }
  });
});
