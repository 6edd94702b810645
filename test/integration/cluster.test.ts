import { execFile } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Cluster } from 'ioredis';
import { pino } from 'pino';
import { Webhook as StandardWebhook } from 'standardwebhooks';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { partitionOf } from '../../src/delivery/jobs.js';
import type { WebhookEventType } from '../../src/domain/events.js';
import type { Machine } from '../../src/domain/machine.js';
import { StreamIngestSource } from '../../src/ingest/stream-source.js';
import { startRedisCluster, type RedisClusterHandle } from '../helpers/redis-cluster.js';
import { findRedisServerBinary, freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { connectRedis, keySlot, masterNodes, type Redis } from '../../src/store/redis.js';
import { testApp, type TestApp, type TestAppOptions } from '../helpers/app.js';
import { readModelsProjected } from '../helpers/read-models.js';
import { RUN_TS, runCli, startCli } from '../helpers/cli.js';
import { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const serverBinary = await findRedisServerBinary();
const cliBinary = await findRedisServerBinary(undefined, undefined, 'redis-cli');
const missing = [serverBinary ? undefined : 'redis-server', cliBinary ? undefined : 'redis-cli'].filter(
  (name) => name !== undefined,
);
if (missing.length > 0) {
  // CI installs Debian's redis-server, which brings redis-cli (redis-tools): missing there is a defect.
  if (process.env.CI)
    throw new Error(`the Redis Cluster tests need ${missing.join(' and ')} in CI (apt-get install redis-server)`);
  console.warn(
    `skipping the Redis Cluster tests: ${missing.join(' and ')} not installed (Debian: apt-get install redis-server)`,
  );
}

const execFileAsync = promisify(execFile);

const WHSEC = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;

const machineOf = (id: string, gpu: string, status = 'available'): Machine => ({
  status,
  metadata: { machine_id: id },
  hardware_specs: {
    cpu: { model: 'AMD EPYC 7763', cores: 32 },
    memory: { total_memory: 128 },
    gpus: [{ id: `${id}-g0`, name: gpu }],
  },
});

const eventOf = (
  eventType: WebhookEventType,
  vendorId: string,
  data: object = machineOf(`m-${randomUUID().slice(0, 8)}`, 'NVIDIA H100'),
) => ({
  event_id: randomUUID(),
  event_type: eventType,
  vendor_id: vendorId,
  timestamp: new Date().toISOString(),
  data,
});

/** Every key of `prefix` on each master, by the master's port. */
async function keysByNode(redis: Redis, prefix: string): Promise<Map<number, string[]>> {
  const found = new Map<number, string[]>();
  for (const node of await masterNodes(redis)) {
    const keys: string[] = [];
    let cursor = '0';
    do {
      const [next, batch] = await node.scan(cursor, 'MATCH', `{${prefix}:*`, 'COUNT', 1000);
      keys.push(...batch);
      cursor = next;
    } while (cursor !== '0');
    found.set(Number(node.options.port), keys);
  }
  return found;
}

/** The port of the master serving each slot range, from CLUSTER SLOTS. */
async function slotOwners(redis: Redis): Promise<(slot: number) => number | undefined> {
  const ranges = await redis.cluster('SLOTS');
  return (slot) => ranges.find(([start, end]) => slot >= start && slot <= end)?.[2]?.[1];
}

describe.skipIf(missing.length > 0)('Hookline on a local 3-master Redis Cluster', () => {
  let cluster: RedisClusterHandle;
  let dir: string;

  beforeAll(async () => {
    dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-cluster-'));
    cluster = await startRedisCluster({ serverBinary: serverBinary!, cliBinary: cliBinary!, dir });
  });
  afterAll(async () => {
    await cluster?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  let receiver: TestReceiver;
  let vendorKey: string;
  let eventsKey: string;

  /** The engine on the cluster: the admin API, the stores and a delivery worker, all over Cluster connections. */
  async function engine(options: TestAppOptions = {}): Promise<TestApp> {
    t = await testApp({ redisUrl: cluster.url, queuePartitions: 4, retryScheduleMs: [0, 200, 200], ...options });
    expect(t.redis).toBeInstanceOf(Cluster);
    receiver = new TestReceiver();
    await receiver.start();
    vendorKey = await t.keyFor(['vendor'], 'vendor-a');
    eventsKey = await t.keyFor(['events:write']);
    // The breaker has its own tests; here every attempt must reach the receiver.
    worker = await startTestWorker(t, { breaker: { failureThreshold: 1_000 } });
    return t;
  }

  afterEach(async () => {
    await worker?.close();
    await receiver?.close();
    if (t) {
      const prefix = t.prefix;
      await t.close();
      // Clean-up scanned every master: nothing of the test's prefix is left anywhere.
      const probe = connectRedis(cluster.url, {
        connectionName: 'hookline-test-cluster-probe',
        maxRetriesPerRequest: 3,
      });
      const left = [...(await keysByNode(probe, prefix)).values()].flat();
      await probe.quit();
      expect(left).toEqual([]);
    }
    t = undefined;
    worker = undefined;
  });

  const api = (method: 'GET' | 'POST' | 'PATCH' | 'DELETE', url: string, payload?: object, key = vendorKey) =>
    t!.app.inject({ method, url, headers: { 'x-api-key': key }, ...(payload === undefined ? {} : { payload }) });

  async function register(
    eventType: WebhookEventType,
    urlPath: string,
    secret?: string,
    key = vendorKey,
  ): Promise<string> {
    const res = await api(
      'POST',
      '/vendors/v1/webhooks',
      { event_type: eventType, callback_url: `${receiver.base}${urlPath}`, ...(secret ? { secret } : {}) },
      key,
    );
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  async function post(...events: object[]) {
    const res = await api('POST', '/internal/v1/events', { events }, eventsKey);
    expect(res.statusCode).toBe(202);
    return res.json<{
      results: { event_id: string; status: string; deliveries?: number }[];
      accepted: number;
      duplicates: number;
    }>();
  }

  it('ingests over the HTTP API and delivers signed events to a real receiver, each once', async () => {
    const app = await engine();
    const webhookId = await register('EVENT_TYPE_MACHINE_CREATED', '/hooks', WHSEC);
    const events = [
      eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a'),
      eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a'),
    ];
    const answer = await post(...events);
    expect(answer.results).toEqual(events.map((e) => ({ event_id: e.event_id, status: 'accepted', deliveries: 1 })));
    expect((await post(events[0]!)).duplicates).toBe(1);

    await waitFor(() => receiver.at('/hooks').length >= 2, 15_000, 'two deliveries');
    const verifier = new StandardWebhook(WHSEC);
    const received = receiver.at('/hooks').map((request) => {
      const h = request.headers;
      verifier.verify(request.body, {
        'webhook-id': String(h['webhook-id']),
        'webhook-timestamp': String(h['webhook-timestamp']),
        'webhook-signature': String(h['webhook-signature']),
      });
      return (JSON.parse(request.body) as { event_id: string }).event_id;
    });
    expect(received.sort()).toEqual(events.map((e) => e.event_id).sort());
    const deliveries = await waitFor(
      async () => {
        const list = (await api('GET', `/vendors/v1/webhooks/${webhookId}/deliveries`)).json<{
          deliveries: { status: string }[];
        }>().deliveries;
        return list.length === 2 && list.every((d) => d.status === 'delivered') && list;
      },
      10_000,
      'delivered records',
    );
    expect(deliveries).toHaveLength(2);
    await queuesDrained(app.queues);
    expect(receiver.at('/hooks')).toHaveLength(2);
  });

  it('delivers a FIFO webhook’s events one at a time in accept order, its line, ready set and heads index on their own slots', async () => {
    const app = await engine();
    // The first delivery fails once: the rest wait behind it.
    receiver.script('/fifo', { status: 500 }, { status: 200 });
    const res = await api('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      callback_url: `${receiver.base}/fifo`,
      ordering: 'fifo',
    });
    expect(res.statusCode).toBe(201);
    const webhookId = res.json<{ webhook_id: string }>().webhook_id;
    const events = Array.from({ length: 12 }, () => eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a'));
    for (let i = 0; i < events.length; i += 4) await post(...events.slice(i, i + 4));
    await waitFor(() => receiver.at('/fifo').length >= events.length + 1, 15_000, 'every delivery and one retry');
    const ids = events.map((e) => e.event_id);
    expect(receiver.at('/fifo').map((r) => (JSON.parse(r.body) as { event_id: string }).event_id)).toEqual([
      ids[0],
      ...ids,
    ]);
    // The line and its lease live in the slot of the webhook's queue partition, beside the ready set, the heads index and its BullMQ jobs.
    const n = partitionOf(webhookId, 4);
    const slot = keySlot(`${app.keys.deliveryQueuePrefix(n)}:x`);
    for (const key of [
      app.keys.fifo.line(n, webhookId),
      app.keys.fifo.jobs(n, webhookId),
      app.keys.fifo.lease(n, webhookId),
      app.keys.fifo.ready(n),
      app.keys.fifo.heads(n),
    ]) {
      expect(keySlot(key)).toBe(slot);
    }
    const stats = await waitFor(
      async () => {
        const body = (await api('GET', `/vendors/v1/webhooks/${webhookId}/stats`)).json<{
          ordering: string;
          fifo_line: { length: number } | null;
        }>();
        return body.fifo_line?.length === 0 && body;
      },
      5_000,
      'an empty line',
    );
    expect(stats.ordering).toBe('fifo');
    // The oldest head's age, read over every partition's master: none waits.
    expect(await app.fifoLines.oldestHeadAgeMs(Date.now())).toBe(0);
  });

  it('holds the deliveries of paused webhooks (batches and a FIFO line) and sends them on enable, the line in order', async () => {
    await engine({ retryScheduleMs: [0, 60_000] });
    const batched = await register('EVENT_TYPE_MACHINE_CREATED', '/paused');
    const res = await api('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      callback_url: `${receiver.base}/paused-fifo`,
      ordering: 'fifo',
    });
    expect(res.statusCode).toBe(201);
    const lined = res.json<{ webhook_id: string }>().webhook_id;
    for (const id of [batched, lined])
      expect((await api('PATCH', `/vendors/v1/webhooks/${id}`, { enabled: false })).statusCode).toBe(200);
    const created = Array.from({ length: 4 }, () => eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a'));
    const updated = Array.from({ length: 4 }, () => eventOf('EVENT_TYPE_MACHINE_UPDATED', 'vendor-a'));
    await post(...created, ...updated);
    const pending = async (id: string) =>
      (await api('GET', `/vendors/v1/webhooks/${id}/deliveries?status=pending`)).json<{ deliveries: unknown[] }>()
        .deliveries.length;
    // Every batch delivery held, and the line's head.
    await waitFor(
      async () => (await pending(batched)) === 4 && (await pending(lined)) === 1,
      15_000,
      'held deliveries',
    );
    expect(receiver.requests).toHaveLength(0);

    for (const id of [batched, lined])
      expect((await api('PATCH', `/vendors/v1/webhooks/${id}`, { enabled: true })).statusCode).toBe(200);
    await waitFor(() => receiver.requests.length === 8, 15_000, 'every held delivery after enable');
    const idsAt = (urlPath: string) =>
      receiver.at(urlPath).map((r) => (JSON.parse(r.body) as { event_id: string }).event_id);
    expect(idsAt('/paused').sort()).toEqual(created.map((e) => e.event_id).sort());
    expect(idsAt('/paused-fifo')).toEqual(updated.map((e) => e.event_id));
  });

  it('registers, lists, updates and deletes webhooks, answering 409 on a second webhook for a type', async () => {
    await engine();
    const first = await register('EVENT_TYPE_MACHINE_CREATED', '/a');
    const conflict = await api('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      callback_url: `${receiver.base}/b`,
    });
    expect(conflict.statusCode).toBe(409);
    const second = await register('EVENT_TYPE_DEPLOYMENT_CREATED', '/b', 'plain-secret');
    const listed = (await api('GET', '/vendors/v1/webhooks')).json<{ webhooks: { webhook_id: string }[] }>().webhooks;
    expect(listed.map((w) => w.webhook_id).sort()).toEqual([first, second].sort());

    expect(
      (await api('PATCH', `/vendors/v1/webhooks/${second}`, { event_type: 'EVENT_TYPE_MACHINE_CREATED' })).statusCode,
    ).toBe(409);
    const patched = await api('PATCH', `/vendors/v1/webhooks/${first}`, {
      callback_url: `${receiver.base}/a2`,
      secret: 'rotated',
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ webhook_id: first, callback_url: `${receiver.base}/a2`, secret: 'rotated' });

    expect((await api('DELETE', `/vendors/v1/webhooks/${first}`)).statusCode).toBe(204);
    expect((await api('DELETE', `/vendors/v1/webhooks/${first}`)).statusCode).toBe(404);
    // The event type is free again.
    await register('EVENT_TYPE_MACHINE_CREATED', '/c');
    expect((await api('GET', '/vendors/v1/webhooks')).json<{ webhooks: unknown[] }>().webhooks).toHaveLength(2);
  });

  it('dead-letters a failing delivery, replays one, then bulk-replays the rest as a task', async () => {
    await engine();
    receiver.script('/down', { status: 503 });
    const id = await register('EVENT_TYPE_DEPLOYMENT_UPDATED', '/down');
    const deployment = () => ({
      deployment_id: `d-${randomUUID().slice(0, 8)}`,
      machine_id: 'm-1',
      status: 'STATUS_RUNNING',
      fail_reason: '',
      metadata: {},
    });
    const deployments = [1, 2, 3].map(() => deployment());
    await post(...deployments.map((d) => eventOf('EVENT_TYPE_DEPLOYMENT_UPDATED', 'vendor-a', d)));
    // The batch's three agent statuses, each on its own slot, were written by one script per slot.
    const agentsKey = await t!.keyFor(['agents:read']);
    await readModelsProjected(t!.redis, t!.keys);
    for (const d of deployments) {
      const res = await api('GET', `/rental/v1/machines/agents/${d.deployment_id}`, undefined, agentsKey);
      expect(res.statusCode).toBe(200);
      expect(res.json()).toMatchObject({ deployment_id: d.deployment_id, status: 'STATUS_RUNNING' });
    }
    const dead = await waitFor(
      async () => {
        const list = (await api('GET', `/vendors/v1/webhooks/${id}/dead-letters`)).json<{
          dead_letters: { delivery_id: string; attempts: number }[];
        }>().dead_letters;
        return list.length === 3 && list;
      },
      20_000,
      'three dead letters',
    );
    expect(dead.every((d) => d.attempts === 3)).toBe(true);
    expect(receiver.at('/down')).toHaveLength(9);

    receiver.script('/down', { status: 204 });
    const one = await api('POST', `/vendors/v1/webhooks/${id}/dead-letters/${dead[0]!.delivery_id}/replay`);
    expect(one.statusCode).toBe(202);
    expect(
      (await api('POST', `/vendors/v1/webhooks/${id}/dead-letters/${dead[0]!.delivery_id}/replay`)).statusCode,
    ).toBe(409);
    await waitFor(() => receiver.at('/down').length === 10, 10_000, 'the replayed delivery');
    const replayed = await waitFor(
      async () => {
        const detail = (
          await api('GET', `/vendors/v1/webhooks/${id}/deliveries/${one.json<{ delivery_id: string }>().delivery_id}`)
        ).json<{
          delivery?: { status: string; replay_of?: string };
        }>();
        return detail.delivery?.status === 'delivered' && detail.delivery;
      },
      10_000,
      'the replay recorded as delivered',
    );
    expect(replayed.replay_of).toBe(dead[0]!.delivery_id);

    const bulk = await api('POST', `/vendors/v1/webhooks/${id}/dead-letters/replay`);
    expect(bulk.statusCode).toBe(202);
    const taskKey = await t!.keyFor(['tasks:read']);
    const task = await waitFor(
      async () => {
        const res = (
          await api('GET', `/rental/v1/tasks/${bulk.json<{ task_id: string }>().task_id}`, undefined, taskKey)
        ).json<{ status: string }>();
        return res.status === 'success' && res;
      },
      15_000,
      'the bulk replay task',
    );
    expect(task).toMatchObject({ status: 'success', fail_reason: null, progress: { total: 2, done: 2 } });
    await waitFor(() => receiver.at('/down').length === 12, 10_000, 'the bulk-replayed deliveries');
    expect(new Set(receiver.at('/down').map((r) => r.headers['webhook-id'])).size).toBe(3);
    expect(
      (await api('GET', `/vendors/v1/webhooks/${id}/dead-letters`)).json<{ dead_letters: unknown[] }>().dead_letters,
    ).toHaveLength(0);
  });

  it('serves the machine listing from machines ingested as events, with filters and pagination', async () => {
    await engine();
    const machinesKey = await t!.keyFor(['machines:read']);
    const fleet = Array.from({ length: 25 }, (_, i) =>
      machineOf(
        `m-${String(i).padStart(2, '0')}`,
        i % 2 === 0 ? 'NVIDIA GeForce RTX 4090' : 'NVIDIA A100',
        i % 5 === 0 ? 'unavailable' : 'available',
      ),
    );
    expect((await post(...fleet.map((m) => eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a', m)))).accepted).toBe(25);
    const later = new Date(Date.now() + 1_000).toISOString();
    await post(
      {
        ...eventOf('EVENT_TYPE_MACHINE_UPDATED', 'vendor-a', machineOf('m-01', 'NVIDIA GeForce RTX 4090')),
        timestamp: later,
      },
      { ...eventOf('EVENT_TYPE_MACHINE_REMOVED', 'vendor-a', { metadata: { machine_id: 'm-02' } }), timestamp: later },
    );
    await readModelsProjected(t!.redis, t!.keys);

    const list = async (query: string) => {
      const res = await api('GET', `/rental/v1/machines${query}`, undefined, machinesKey);
      return {
        status: res.statusCode,
        body: res.json<{ total: number; current_page: number; page_size: number; machines: Machine[] }>(),
      };
    };
    const ids = (machines: Machine[]) => machines.map((m) => m.metadata.machine_id);
    const all = await list('');
    expect(all.body.total).toBe(24);
    expect(ids(all.body.machines)).toEqual(
      fleet
        .map((m) => m.metadata.machine_id)
        .filter((id) => id !== 'm-02')
        .slice(0, 20),
    );

    // RTX 4090 (even ids, m-02 removed, plus the updated m-01) and available (not a multiple of 5).
    const expected = ['m-01', 'm-04', 'm-06', 'm-08', 'm-12', 'm-14', 'm-16', 'm-18', 'm-22', 'm-24'];
    const pages = [
      await list('?filter=gpu_name:rtx%204090,machine_status:available&page_size=4'),
      await list('?filter=gpu_name:rtx%204090,machine_status:available&page_size=4&page=3'),
    ];
    expect(pages.map((p) => p.body.total)).toEqual([expected.length, expected.length]);
    expect(ids(pages[0]!.body.machines)).toEqual(expected.slice(0, 4));
    expect(ids(pages[1]!.body.machines)).toEqual(expected.slice(8));
    expect((await list('?filter=gpu_name:a100&filter=memory_size:128GB')).body.total).toBe(11);
    expect((await list('?filter=machine_id:m-02')).status).toBe(404);
    expect((await list('?filter=bogus:1')).status).toBe(400);
  });

  it('spreads the delivery queue partitions over the masters (default prefix and partitions), and cleans up on every one', async () => {
    // The default prefix `hl` with the default 4 partitions: the tags {hl:q0}…{hl:q3} hash to slots of all three masters.
    const app = await engine({ prefix: 'hl' });
    const webhookOf = new Map<number, string>();
    for (let vendor = 0; webhookOf.size < 4 && vendor < 64; vendor += 1) {
      const key = await app.keyFor(['vendor'], `v-${vendor}`);
      const id = await register('EVENT_TYPE_MACHINE_UPDATED', `/p/${vendor}`, undefined, key);
      if (!webhookOf.has(partitionOf(id, 4))) webhookOf.set(partitionOf(id, 4), `v-${vendor}`);
    }
    expect(webhookOf.size).toBe(4);
    await post(...[...webhookOf.values()].map((vendor) => eventOf('EVENT_TYPE_MACHINE_UPDATED', vendor)));
    await waitFor(() => receiver.requests.length === 4, 15_000, 'a delivery from each partition');

    const owner = await slotOwners(app.redis);
    const byNode = await keysByNode(app.redis, 'hl');
    const nodeOfPartition = new Map<number, Set<number>>();
    for (const [port, keys] of byNode) {
      for (const key of keys) {
        const partition = /^\{hl:q(\d+)\}/.exec(key)?.[1];
        if (partition === undefined) continue;
        // A key is on the master that serves its hash tag's slot.
        expect(owner(keySlot(key))).toBe(port);
        nodeOfPartition.set(Number(partition), (nodeOfPartition.get(Number(partition)) ?? new Set()).add(port));
      }
    }
    expect([...nodeOfPartition.keys()].sort()).toEqual([0, 1, 2, 3]);
    // Each partition's keys share one slot, hence one master…
    for (const nodes of nodeOfPartition.values()) expect(nodes.size).toBe(1);
    // …and the partitions, between them, use at least two masters (here all three).
    expect(new Set([...nodeOfPartition.values()].flatMap((nodes) => [...nodes])).size).toBeGreaterThanOrEqual(2);
    // Keys of the prefix live on every master, so clean-up (afterEach) must visit each.
    expect([...byNode.values()].every((keys) => keys.length > 0)).toBe(true);
  });

  it('keeps the dedupe marks in 16 partitions spread over the masters, one script per partition', async () => {
    const app = await engine();
    const ids = Array.from({ length: 2_000 }, () => randomUUID());
    const nowMs = Date.now();
    await app.dedupe.mark(ids.slice(0, 1_000), nowMs);
    const seen = await app.dedupe.seen(ids, nowMs + 1);
    expect(seen.slice(0, 1_000).every(Boolean)).toBe(true);
    expect(seen.slice(1_000).some(Boolean)).toBe(false);

    const owner = await slotOwners(app.redis);
    const partitionsOf = new Map<number, Set<string>>();
    for (const [port, keys] of await keysByNode(app.redis, app.prefix)) {
      for (const key of keys) {
        const tag = /^\{[^:]+:dd(\d+)\.\d+\}/.exec(key)?.[0];
        if (tag === undefined) continue;
        expect(owner(keySlot(key))).toBe(port);
        partitionsOf.set(port, (partitionsOf.get(port) ?? new Set()).add(tag));
      }
    }
    const counts = [...partitionsOf.values()].map((tags) => tags.size).sort((a, b) => a - b);
    console.log(`dedupe partitions per master: ${counts.join(', ')}`);
    // Partition n's tag is in the n-th sixteenth of the slots. With three contiguous slot ranges,
    // a master holds every partition whose sixteenth lies within its range (5, 4 and 5 of them)
    // and may hold one of the two sixteenths that straddle a boundary, where the tag (which
    // depends on the prefix) falls: 4 to 6 each, all 16 in all.
    expect(counts).toHaveLength(3);
    expect(counts.reduce((a, b) => a + b, 0)).toBe(16);
    expect(counts[0]).toBeGreaterThanOrEqual(4);
    expect(counts[2]).toBeLessThanOrEqual(6);
  });

  it('keeps each filtered webhook’s newest event for the dry run, written per slot, whether the filter let it through or not', async () => {
    const app = await engine();
    const otherKey = await app.keyFor(['vendor'], 'vendor-b');
    const filter = { path: 'data.status', eq: 'available' };
    const webhooks: { id: string; key: string; vendor: string; type: WebhookEventType }[] = [];
    for (const [vendor, key] of [
      ['vendor-a', vendorKey],
      ['vendor-b', otherKey],
    ] as const) {
      for (const type of ['EVENT_TYPE_MACHINE_CREATED', 'EVENT_TYPE_MACHINE_UPDATED'] as const) {
        const res = await api(
          'POST',
          '/vendors/v1/webhooks',
          { event_type: type, callback_url: `${receiver.base}/filtered`, filter },
          key,
        );
        expect(res.statusCode, res.body).toBe(201);
        webhooks.push({ id: res.json<{ webhook_id: string }>().webhook_id, key, vendor, type });
      }
    }
    // Spread over slots, so the writes go out as one script call per slot.
    expect(new Set(webhooks.map(({ id }) => keySlot(app.keys.deliveries.recentEvents(id)))).size).toBeGreaterThan(1);

    // One batch: every webhook gets a matching and a held-back event, the last one alternating, so
    // the newest kept is a delivered body for half of them and a filtered-out envelope for the rest.
    const newest = new Map<string, { eventId: string; matched: boolean }>();
    const events = webhooks.flatMap(({ id, vendor, type }, i) => {
      const pair = [
        eventOf(type, vendor, machineOf(`m-${i}-a`, 'NVIDIA H100', 'available')),
        eventOf(type, vendor, machineOf(`m-${i}-u`, 'NVIDIA H100', 'unavailable')),
      ];
      if (i % 2 === 1) pair.reverse();
      newest.set(id, { eventId: pair[1]!.event_id, matched: i % 2 === 1 });
      return pair;
    });
    const answer = await post(...events);
    expect(answer.accepted).toBe(events.length);
    await waitFor(() => receiver.at('/filtered').length >= webhooks.length, 15_000, 'one delivery per webhook');

    for (const { id, key } of webhooks) {
      const res = await api('POST', `/vendors/v1/webhooks/${id}/filter-test`, { recent: true }, key);
      expect(res.statusCode, res.body).toBe(200);
      const { eventId, matched } = newest.get(id)!;
      expect(res.json()).toMatchObject({ source: 'recent', matched, event: { event_id: eventId } });
    }
    await queuesDrained(app.queues);
    expect(receiver.at('/filtered')).toHaveLength(webhooks.length);
  });

  it('ingests from the Redis stream on the cluster, and stop() ends the blocked read on the stream’s master', async () => {
    const app = await engine();
    await register('EVENT_TYPE_MACHINE_CREATED', '/stream', WHSEC);
    const source = new StreamIngestSource({
      redis: app.redis,
      stream: app.keys.events.stream,
      deadLetterStream: app.keys.events.deadOf(0),
      ingestor: app.ingestor,
      logger: pino({ level: 'silent' }),
      blockMs: 10_000,
    });
    await source.start();
    try {
      const event = eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a');
      await app.redis.xadd(app.keys.events.stream, '*', 'event', JSON.stringify(event));
      const [request] = await waitFor(
        () => receiver.at('/stream').length > 0 && receiver.at('/stream'),
        15_000,
        'the stream event delivered',
      );
      expect(request!.headers['webhook-id']).toBe(event.event_id);
      await waitFor(
        async () =>
          Number(((await app.redis.xpending(app.keys.events.stream, 'hookline-ingest')) as [number])[0]) === 0,
        5_000,
        'the entry acknowledged',
      );
      // An entry that cannot be ingested is moved and acknowledged in one transaction: its dead-letter stream shares the stream's slot.
      const unreadable = await app.redis.xadd(app.keys.events.stream, '*', 'event', 'not json');
      expect(keySlot(app.keys.events.deadOf(0))).toBe(keySlot(app.keys.events.stream));
      const [kept] = await waitFor(
        async () => {
          const entries = await app.redis.xrange(app.keys.events.deadOf(0), '-', '+');
          return entries.length > 0 && entries.map(([, fields]) => fields);
        },
        5_000,
        'the entry set aside',
      );
      expect(kept).toEqual([
        'reason',
        'the "event" field is not valid JSON',
        'failed_at',
        expect.any(String),
        'entry_id',
        unreadable,
        'event',
        'not json',
      ]);
      // Once the reader blocks again, stop: CLIENT UNBLOCK must reach the master serving the stream.
      await waitFor(
        async () => {
          const lists = await Promise.all(
            (app.redis as Cluster).nodes('master').map((node) => node.client('LIST') as Promise<string>),
          );
          return lists.some((list) =>
            list.split('\n').some((client) => client.includes('cmd=xreadgroup') && / flags=\S*b/.test(client)),
          );
        },
        5_000,
        'the stream reader blocked again',
      );
    } finally {
      const startedMs = Date.now();
      await source.stop();
      expect(Date.now() - startedMs).toBeLessThan(3_000);
    }
  });

  it('lets the process exit once a connection is closed, also while it was connecting or reading the slot map', async () => {
    // ioredis re-arms its slot refresh timer after quit() in both cases; a CLI command then never ended.
    const fixture = path.resolve(import.meta.dirname, '../fixtures/cluster-quit.ts');
    for (const moment of ['connecting', 'refreshing', 'ready']) {
      const startedMs = Date.now();
      const { stdout } = await execFileAsync(process.execPath, [...RUN_TS, fixture, cluster.url, moment], {
        timeout: 15_000,
        killSignal: 'SIGKILL',
      }).catch((error: Error & { killed?: boolean }) => {
        throw new Error(
          `closed when ${moment}, the process ${error.killed ? 'did not exit within 15 s' : `failed: ${error.message}`}`,
        );
      });
      expect(stdout.trim()).toBe(`closed ${moment}`);
      // Well under the refresh interval (5 s) and ioredis's 2 s fallback for a socket that does not close.
      expect(Date.now() - startedMs, moment).toBeLessThan(4_500);
    }
  });

  it('runs the CLI with REDIS_URL naming the cluster: `keys create`, then `hookline worker` ingesting the stream and delivering, and a clean SIGTERM', async () => {
    const app = await engine();
    await worker!.close();
    worker = undefined;
    await register('EVENT_TYPE_MACHINE_CREATED', '/cli');
    const env = {
      ...Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'),
      ),
      REDIS_URL: cluster.url,
      HOOKLINE_REDIS_PREFIX: app.prefix,
      HOOKLINE_SECRET_KEY: app.secretKey.toString('base64'),
      HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
      HOOKLINE_QUEUE_PARTITIONS: '4',
      HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
      HOOKLINE_LOG_FORMAT: 'json',
    };
    // A key issued by the CLI on the cluster works in the API.
    const created = await runCli(['keys', 'create', '--name', 'producer', '--role', 'events:write'], env);
    expect(created.code, created.stderr).toBe(0);
    eventsKey = created.stdout.trim();

    const cli = await startCli(['worker'], env, /delivery worker running/);
    try {
      const streamed = eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a');
      await app.redis.xadd(app.keys.events.stream, '*', 'event', JSON.stringify(streamed));
      const posted = eventOf('EVENT_TYPE_MACHINE_CREATED', 'vendor-a');
      await post(posted);
      const requests = await waitFor(
        () => receiver.at('/cli').length >= 2 && receiver.at('/cli'),
        20_000,
        'deliveries by the worker process',
      ).catch((error: Error) => {
        throw new Error(`${error.message}; the worker's output:\n${cli.output()}`);
      });
      expect(requests.map((r) => r.headers['webhook-id']).sort()).toEqual([streamed.event_id, posted.event_id].sort());
    } finally {
      cli.child.kill('SIGTERM');
    }
    const exit = await Promise.race([
      cli.exited,
      new Promise<'hung'>((resolve) => setTimeout(() => resolve('hung'), 15_000)),
    ]);
    if (exit === 'hung') cli.child.kill('SIGKILL');
    expect(exit, cli.output()).toBe(0);
    // Two CLI processes compiled from source on start, a delivery and a shutdown, each bounded
    // above (30 s, 60 s, 20 s, 15 s): the test's own budget covers them, so a slow start on a
    // loaded machine fails with the step that was slow, not the suite's 30 s default.
  }, 150_000);
});
