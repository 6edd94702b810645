import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { isUuid } from '../../src/domain/ids.js';
import {
  agent,
  DEDUPE_WINDOW_MS,
  ingestFixture,
  machine,
  NOW_MS,
  sampleEvent,
  task,
  type IngestFixture,
} from '../helpers/ingest-app.js';
import { commandsNaming } from '../helpers/redis.js';

const id = (n: number) => `00000000-0000-4000-8000-${String(n).padStart(12, '0')}`;
const TASK_ID = '9b2e4c1a-7d3f-4e8a-b6c5-1f0a2d3e4b5c';

let f: IngestFixture;
beforeEach(() => {
  f = ingestFixture();
});
afterEach(async () => f.cleanup());

describe('Ingestor: matching and the envelope', () => {
  it('delivers each of the six event types to the vendor’s webhook for that type, with the exact envelope', async () => {
    const hooks = new Map<string, string>();
    for (const eventType of WEBHOOK_EVENT_TYPES) hooks.set(eventType, await f.subscribe('v-1', eventType));
    // Another vendor's webhook for the same type must not receive v-1's event.
    await f.subscribe('v-2', 'EVENT_TYPE_MACHINE_CREATED');

    const events = WEBHOOK_EVENT_TYPES.map((eventType, i) =>
      sampleEvent(eventType, 'v-1', { event_id: id(i + 1), timestamp: `2024-05-01T1${i}:00:00+02:00` }),
    );
    const results = await f.ingest(events);

    expect(results).toEqual(
      WEBHOOK_EVENT_TYPES.map((_, i) => ({ event_id: id(i + 1), status: 'accepted', deliveries: 1 })),
    );
    expect(f.enqueuer.calls).toHaveLength(1);
    const requests = f.enqueuer.requests;
    expect(requests.map((r) => [r.eventType, r.webhookId, r.vendorId, r.eventId])).toEqual(
      WEBHOOK_EVENT_TYPES.map((eventType, i) => [eventType, hooks.get(eventType), 'v-1', id(i + 1)]),
    );
    for (const request of requests) expect(request.acceptedAtMs).toBe(NOW_MS);

    // Exact bytes, written out by hand for two of them.
    expect(requests[2]!.body).toBe(
      `{"version":"1.0","event_id":"${id(3)}","event_type":"EVENT_TYPE_MACHINE_REMOVED","timestamp":"2024-05-01T10:00:00.000Z","data":{"metadata":{"machine_id":"m-1"}}}`,
    );
    expect(requests[5]!.body).toBe(
      `{"version":"1.0","event_id":"${id(6)}","event_type":"EVENT_TYPE_DEPLOYMENT_STOPPED","timestamp":"2024-05-01T13:00:00.000Z",` +
        '"data":{"deployment_id":"dep-1","machine_id":"m-1","status":"STATUS_STOPPED","fail_reason":"","metadata":{"region":"eu-central"}}}',
    );
    expect(JSON.parse(requests[0]!.body)).toEqual({
      version: '1.0',
      event_id: id(1),
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      timestamp: '2024-05-01T08:00:00.000Z',
      data: machine('m-1'),
    });
  });

  it('delivers data exactly as the producer sent it: fields the schema does not name stay, no defaults are added', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_UPDATED');
    await f.subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_UPDATED');
    const machineData = {
      ...machine('m-7'),
      owner_note: 'rack 4',
      hardware_specs: {
        cpu: { model: 'EPYC', cores: 8, microcode: '0xa0011d1' },
        gpus: [{ name: 'H100', nvlink: true }],
      },
    };
    const agentData = { status: 'STATUS_RUNNING', machine_id: 'm-7', deployment_id: 'dep-7', image: 'vllm:0.6' };
    const results = await f.ingest([
      {
        event_id: id(1),
        event_type: 'EVENT_TYPE_MACHINE_UPDATED',
        vendor_id: 'v-1',
        timestamp: '2024-05-01T12:00:00Z',
        data: machineData,
      },
      {
        event_id: id(2),
        event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
        vendor_id: 'v-1',
        timestamp: '2024-05-01T12:00:00Z',
        data: agentData,
      },
    ]);
    expect(results.map((r) => r.status)).toEqual(['accepted', 'accepted']);
    const [machineBody, agentBody] = f.enqueuer.requests.map((r) => r.body);
    expect(machineBody).toBe(
      `{"version":"1.0","event_id":"${id(1)}","event_type":"EVENT_TYPE_MACHINE_UPDATED","timestamp":"2024-05-01T12:00:00.000Z","data":${JSON.stringify(machineData)}}`,
    );
    expect(agentBody).toBe(
      `{"version":"1.0","event_id":"${id(2)}","event_type":"EVENT_TYPE_DEPLOYMENT_UPDATED","timestamp":"2024-05-01T12:00:00.000Z","data":${JSON.stringify(agentData)}}`,
    );
    // The read models keep their validated form.
    expect(await f.agents.get('dep-7')).toEqual({
      deployment_id: 'dep-7',
      machine_id: 'm-7',
      status: 'STATUS_RUNNING',
      fail_reason: '',
      metadata: {},
    });
    expect(await f.machines.get('m-7')).not.toHaveProperty('owner_note');
  });

  it('rejects an event with an unknown top-level field alone, naming the field', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const results = await f.ingest([
      {
        event_id: id(1),
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor: 'v-1',
        vendor_id: 'v-1',
        data: machine('m-1'),
      },
      {
        event_id: id(2),
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor_id: 'v-1',
        data: machine('m-2'),
        status: 'available',
      },
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(3) }),
    ]);
    expect(results).toEqual([
      { event_id: id(1), status: 'rejected', reason: 'unknown field "vendor"' },
      { event_id: id(2), status: 'rejected', reason: 'unknown field "status"' },
      { event_id: id(3), status: 'accepted', deliveries: 1 },
    ]);
    expect(f.enqueuer.requests.map((r) => r.eventId)).toEqual([id(3)]);
    expect(await f.machines.get('m-2')).toBeUndefined();
  });

  it('rejects an event whose envelope cannot be serialised alone, storing nothing of it, and ingests the rest of the batch', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    // Only an event handed over as an object can hold what JSON cannot write; validation strips the
    // unnamed field from the read models' copy, the envelope keeps it as sent.
    const results = await f.ingest([
      {
        event_id: id(1),
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor_id: 'v-1',
        data: { ...machine('m-1'), size: 10n },
      },
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2), data: machine('m-2') }),
    ]);
    expect(results).toEqual([
      {
        event_id: id(1),
        status: 'rejected',
        reason: 'data: cannot be serialised as JSON (Do not know how to serialize a BigInt)',
      },
      { event_id: id(2), status: 'accepted', deliveries: 1 },
    ]);
    expect(f.enqueuer.requests.map((r) => r.eventId)).toEqual([id(2)]);
    expect(await f.machines.get('m-1')).toBeUndefined();
    expect(await f.machines.get('m-2')).toEqual(machine('m-2'));
    expect(await f.seen(id(1), id(2))).toEqual([false, true]);
  });

  it('rejects an event larger than HOOKLINE_MAX_EVENT_BYTES as delivered alone, subscribed to or not, storing nothing of it', async () => {
    await f.cleanup();
    f = ingestFixture({ eventBytesMax: 4_096 });
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const big = (n: number, vendorId: string) =>
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', vendorId, {
        event_id: id(n),
        data: Object.assign(machine(`m-${n}`), { notes: 'ü'.repeat(2_000) }),
      });
    const results = await f.ingest([
      big(1, 'v-1'),
      // No webhook takes it today: refused all the same, so the answer never depends on who subscribes.
      big(2, 'v-2'),
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(3), data: machine('m-3') }),
    ]);
    // Counted in UTF-8 bytes, as sent: 2,000 two-byte characters.
    const bytes = (n: number) =>
      Buffer.byteLength(JSON.stringify({ data: big(n, 'v-1').data })) - Buffer.byteLength('{"data":}');
    expect(results[2]).toEqual({ event_id: id(3), status: 'accepted', deliveries: 1 });
    for (const [i, n] of [1, 2].entries()) {
      expect(results[i]).toMatchObject({ event_id: id(n), status: 'rejected' });
      expect(results[i]!.reason).toMatch(
        /^the event is [\d,]+ bytes as delivered, over the limit of 4,096 \(HOOKLINE_MAX_EVENT_BYTES\)/,
      );
      expect(Number(/is ([\d,]+) bytes/.exec(results[i]!.reason!)![1]!.replaceAll(',', ''))).toBeGreaterThan(bytes(n));
    }
    expect(f.enqueuer.requests.map((r) => r.eventId)).toEqual([id(3)]);
    expect(await f.machines.get('m-1')).toBeUndefined();
    expect(await f.machines.get('m-2')).toBeUndefined();
    expect(await f.seen(id(1), id(2), id(3))).toEqual([false, false, true]);
  });

  it('accepts an event for a vendor without a webhook, with 0 deliveries and no enqueue', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const results = await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', { event_id: id(1) }),
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-2', { event_id: id(2) }),
    ]);
    expect(results).toEqual([
      { event_id: id(1), status: 'accepted', deliveries: 0 },
      { event_id: id(2), status: 'accepted', deliveries: 0 },
    ]);
    expect(f.enqueuer.calls).toEqual([]);
    expect(await f.machines.get('m-1')).toEqual(machine('m-1'));
  });

  it('assigns an id to an event without one and puts it in the envelope', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_CREATED');
    const [result] = await f.ingest([sampleEvent('EVENT_TYPE_DEPLOYMENT_CREATED', 'v-1')]);
    expect(result).toMatchObject({ status: 'accepted', deliveries: 1 });
    expect(isUuid(result!.event_id!)).toBe(true);
    const body = JSON.parse(f.enqueuer.requests[0]!.body) as { event_id: string; timestamp: string };
    expect(body.event_id).toBe(result!.event_id);
    expect(body.timestamp).toBe(new Date(NOW_MS).toISOString());
  });

  it('applies TASK_UPDATED to the task store and never delivers it', async () => {
    for (const eventType of WEBHOOK_EVENT_TYPES) await f.subscribe('v-1', eventType);
    const results = await f.ingest([
      {
        event_id: id(1),
        event_type: 'TASK_UPDATED',
        vendor_id: 'v-1',
        data: task(TASK_ID.toUpperCase(), 'in_progress'),
      },
    ]);
    expect(results).toEqual([{ event_id: id(1), status: 'accepted', deliveries: 0 }]);
    expect(f.enqueuer.calls).toEqual([]);
    // Stored under the lower-case id, which is what the task lookup asks for.
    expect(await f.tasks.get(TASK_ID)).toEqual(task(TASK_ID, 'in_progress'));
  });
});

describe('Ingestor: idempotency', () => {
  it('delivers an event_id once across batches; the second time it is a duplicate', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const event = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(7) });
    expect(await f.ingest([event])).toEqual([{ event_id: id(7), status: 'accepted', deliveries: 1 }]);
    expect(await f.ingest([event])).toEqual([{ event_id: id(7), status: 'duplicate' }]);
    // The same UUID in upper case is the same event.
    expect(await f.ingest([{ ...event, event_id: id(7).toUpperCase() }])).toEqual([
      { event_id: id(7), status: 'duplicate' },
    ]);
    expect(f.enqueuer.requests).toHaveLength(1);

    // Still a duplicate at the end of the window; accepted again (as a new event) once it is long past.
    const acceptedAtMs = f.clock.nowMs;
    f.clock.nowMs = acceptedAtMs + DEDUPE_WINDOW_MS - 1;
    expect(await f.ingest([event])).toEqual([{ event_id: id(7), status: 'duplicate' }]);
    f.clock.nowMs = acceptedAtMs + 2 * DEDUPE_WINDOW_MS;
    expect(await f.ingest([event])).toEqual([{ event_id: id(7), status: 'accepted', deliveries: 1 }]);
  });

  it('delivers an event_id once within one batch', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_CREATED');
    const event = sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(8) });
    const results = await f.ingest([event, { ...event, data: machine('m-1', 'unavailable') }, event]);
    expect(results).toEqual([
      { event_id: id(8), status: 'accepted', deliveries: 1 },
      { event_id: id(8), status: 'duplicate' },
      { event_id: id(8), status: 'duplicate' },
    ]);
    expect(f.enqueuer.requests).toHaveLength(1);
    // The first occurrence won: the duplicate's data was not projected either.
    expect((await f.machines.get('m-1'))?.status).toBe('available');
  });

  it('marks nothing seen when the enqueuer fails, so a retry delivers', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_DEPLOYMENT_UPDATED');
    const batch = [
      sampleEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', 'v-1', { event_id: id(1) }),
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(2) }),
    ];
    f.enqueuer.failure = new Error('queue unavailable');
    await expect(f.ingest(batch)).rejects.toThrow('queue unavailable');
    expect(await f.seen(id(1), id(2))).toEqual([false, false]);
    expect(f.enqueuer.requests).toEqual([]);

    f.enqueuer.failure = undefined;
    expect(await f.ingest(batch)).toEqual([
      { event_id: id(1), status: 'accepted', deliveries: 1 },
      { event_id: id(2), status: 'accepted', deliveries: 0 },
    ]);
    expect(f.enqueuer.requests.map((r) => r.eventId)).toEqual([id(1)]);
    expect(await f.seen(id(1), id(2))).toEqual([true, true]);
  });
});

describe('Ingestor: validation', () => {
  it('rejects invalid events with reasons and accepts the valid ones of the same batch', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_REMOVED');
    const results = await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1) }),
      { event_id: id(2), event_type: 'EVENT_TYPE_MACHINE_REMOVED', vendor_id: 'v-1', data: { metadata: {} } },
      'not an event',
      { event_type: 'EVENT_TYPE_SOMETHING', vendor_id: 'v-1', data: {} },
      { event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED', data: agent('dep-1', 'STATUS_PENDING') },
      sampleEvent('EVENT_TYPE_MACHINE_REMOVED', 'v-1', { event_id: id(6) }),
    ]);
    expect(results).toEqual([
      { event_id: id(1), status: 'accepted', deliveries: 0 },
      { event_id: id(2), status: 'rejected', reason: 'data.metadata.machine_id: required' },
      { status: 'rejected', reason: 'the event must be a JSON object' },
      { status: 'rejected', reason: expect.stringMatching(/^event_type: must be one of /) as unknown },
      { status: 'rejected', reason: 'vendor_id: required' },
      { event_id: id(6), status: 'accepted', deliveries: 1 },
    ]);
    expect(f.enqueuer.requests.map((r) => r.eventId)).toEqual([id(6)]);
    // A rejected id is not remembered: the corrected event is accepted later.
    expect(await f.seen(id(2))).toEqual([false]);
    expect(await f.ingest([sampleEvent('EVENT_TYPE_MACHINE_REMOVED', 'v-1', { event_id: id(2) })])).toEqual([
      { event_id: id(2), status: 'accepted', deliveries: 1 },
    ]);
  });

  it('answers an empty batch with no results and no Redis work', async () => {
    expect(await f.ingest([])).toEqual([]);
    expect(f.enqueuer.calls).toEqual([]);
  });
});

describe('Ingestor: read models', () => {
  const at = (hour: number) => `2024-05-01T${String(hour).padStart(2, '0')}:00:00Z`;

  it('keeps the newer machine when an older event arrives later, and still delivers the older event', async () => {
    await f.subscribe('v-1', 'EVENT_TYPE_MACHINE_UPDATED');
    await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', {
        event_id: id(1),
        timestamp: at(10),
        data: machine('m-1', 'unavailable'),
      }),
    ]);
    const [older] = await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', {
        event_id: id(2),
        timestamp: at(9),
        data: machine('m-1', 'available'),
      }),
    ]);
    expect(older).toEqual({ event_id: id(2), status: 'accepted', deliveries: 1 });
    expect((await f.machines.get('m-1'))?.status).toBe('unavailable');
    await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', {
        event_id: id(3),
        timestamp: at(11),
        data: machine('m-1', 'available'),
      }),
    ]);
    expect((await f.machines.get('m-1'))?.status).toBe('available');
  });

  it('orders events of one batch by their timestamps, not by their position', async () => {
    await f.ingest([
      sampleEvent('EVENT_TYPE_DEPLOYMENT_STOPPED', 'v-1', {
        event_id: id(1),
        timestamp: at(12),
        data: agent('dep-1', 'STATUS_STOPPED'),
      }),
      sampleEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', 'v-1', {
        event_id: id(2),
        timestamp: at(11),
        data: agent('dep-1', 'STATUS_RUNNING'),
      }),
      { event_id: id(3), event_type: 'TASK_UPDATED', timestamp: at(12), data: task(TASK_ID, 'failed', 'disk full') },
      { event_id: id(4), event_type: 'TASK_UPDATED', timestamp: at(11), data: task(TASK_ID, 'in_progress') },
    ]);
    expect(await f.agents.get('dep-1')).toEqual(agent('dep-1', 'STATUS_STOPPED'));
    expect(await f.tasks.get(TASK_ID)).toEqual(task(TASK_ID, 'failed', 'disk full'));
  });

  it('keeps the newer agent status and task against older events in later batches', async () => {
    await f.ingest([
      sampleEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', 'v-1', {
        event_id: id(1),
        timestamp: at(10),
        data: agent('dep-1', 'STATUS_FAILED', 'image pull failed'),
      }),
      { event_id: id(2), event_type: 'TASK_UPDATED', timestamp: at(10), data: task(TASK_ID, 'success') },
    ]);
    await f.ingest([
      sampleEvent('EVENT_TYPE_DEPLOYMENT_CREATED', 'v-1', {
        event_id: id(3),
        timestamp: at(9),
        data: agent('dep-1', 'STATUS_PENDING'),
      }),
      { event_id: id(4), event_type: 'TASK_UPDATED', timestamp: at(9), data: task(TASK_ID, 'pending') },
    ]);
    expect(await f.agents.get('dep-1')).toEqual(agent('dep-1', 'STATUS_FAILED', 'image pull failed'));
    expect(await f.tasks.get(TASK_ID)).toEqual(task(TASK_ID, 'success'));
  });

  it('writes a batch’s machine events with one script call on the listing’s slot, not commands per event', async () => {
    await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1), timestamp: at(8), data: machine('m-000') }),
    ]);
    // 180 machine events of every kind (each machine created, updated and removed in some order)
    // among deployment and task events, as a busy producer sends them.
    const kinds = [
      'EVENT_TYPE_MACHINE_CREATED',
      'EVENT_TYPE_MACHINE_UPDATED',
      'EVENT_TYPE_MACHINE_REMOVED',
      'EVENT_TYPE_DEPLOYMENT_UPDATED',
    ] as const;
    const events: unknown[] = Array.from({ length: 240 }, (_, i) => {
      const kind = kinds[i % kinds.length]!;
      const machineId = `m-${String(i % 61).padStart(3, '0')}`;
      const data =
        kind === 'EVENT_TYPE_MACHINE_REMOVED'
          ? { metadata: { machine_id: machineId } }
          : kind === 'EVENT_TYPE_DEPLOYMENT_UPDATED'
            ? agent(`dep-${i}`, 'STATUS_RUNNING')
            : machine(machineId);
      return { event_id: id(100 + i), event_type: kind, vendor_id: 'v-1', timestamp: at(9 + Math.floor(i / 60)), data };
    });
    events.push(
      ...Array.from({ length: 20 }, (_, i) => ({
        event_id: id(400 + i),
        event_type: 'TASK_UPDATED',
        timestamp: at(9),
        data: task(id(900 + i), 'success'),
      })),
    );
    const commands = await commandsNaming(f.redis, `{${f.t.prefix}:machines}`, () => f.ingest(events));
    console.log(
      `machine read model commands for one ingest batch of 180 machine events: ${commands.length} (${commands.join(' ')})`,
    );
    expect(commands[0]).toBe('evalsha');
    expect(commands.filter((name) => name === 'evalsha')).toHaveLength(1);
    expect(commands.length).toBeLessThanOrEqual(14);
    expect(await f.machines.get('m-000')).toBeUndefined();
    expect((await f.machines.get('m-001'))?.status).toBe('available');
  });

  it('removes a machine on EVENT_TYPE_MACHINE_REMOVED; an older create does not bring it back', async () => {
    await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_CREATED', 'v-1', { event_id: id(1), timestamp: at(8), data: machine('m-1') }),
    ]);
    expect(await f.machines.get('m-1')).toEqual(machine('m-1'));
    await f.ingest([sampleEvent('EVENT_TYPE_MACHINE_REMOVED', 'v-1', { event_id: id(2), timestamp: at(10) })]);
    expect(await f.machines.get('m-1')).toBeUndefined();
    await f.ingest([
      sampleEvent('EVENT_TYPE_MACHINE_UPDATED', 'v-1', { event_id: id(3), timestamp: at(9), data: machine('m-1') }),
    ]);
    expect(await f.machines.get('m-1')).toBeUndefined();
    const page = await f.machines.list({
      filter: { gpuNames: [], cpuNames: [], machineIds: [], statuses: [] },
      page: 1,
      pageSize: 10,
    });
    expect(page.total).toBe(0);
  });
});
