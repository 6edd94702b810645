import { randomUUID } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { startDeliveryWorld, stopDeliveryWorld, type DeliveryWorld } from '../helpers/delivery-world.js';
import type { TestReceiver } from '../helpers/receiver.js';
import { queuesDrained, waitFor, deliveryLogCaughtUp } from '../helpers/wait.js';

const VENDOR = 'vendor-filters';
const UNAVAILABLE_GPU = {
  and: [
    { path: 'data.status', eq: 'unavailable' },
    { path: 'data.gpu.model', in: ['A100', 'H100'] },
  ],
};

describe('payload filters in the API: stored with the webhook, validated, and tried with filter-test', () => {
  let t: TestApp;
  let key: string;
  beforeEach(async () => {
    t = await testApp();
    key = await t.keyFor(['vendor'], VENDOR);
  });
  afterEach(async () => t.close());

  const call = (
    method: 'GET' | 'POST' | 'PATCH',
    url: string,
    payload?: unknown,
    headers: Record<string, string> = { 'x-api-key': key },
  ) => t.app.inject({ method, url, headers, ...(payload === undefined ? {} : { payload: payload as object }) });

  async function register(filter?: unknown): Promise<string> {
    const res = await call('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_MACHINE_UPDATED',
      callback_url: 'https://vendor.example.com/hooks',
      ...(filter === undefined ? {} : { filter }),
    });
    expect(res.statusCode).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  it('stores a filter on POST, shows it, replaces it on PATCH and removes it with null', async () => {
    const id = await register(UNAVAILABLE_GPU);
    const listed = async () =>
      (await call('GET', '/vendors/v1/webhooks')).json<{ webhooks: { filter: unknown }[] }>().webhooks[0]!.filter;
    expect(await listed()).toEqual(UNAVAILABLE_GPU);
    const patched = await call('PATCH', `/vendors/v1/webhooks/${id}`, {
      filter: { path: 'data.status', ne: 'available' },
    });
    expect(patched.statusCode).toBe(200);
    expect(patched.json()).toMatchObject({ filter: { path: 'data.status', ne: 'available' } });
    expect((await call('PATCH', `/vendors/v1/webhooks/${id}`, { filter: null })).json()).toMatchObject({
      filter: null,
    });
    expect(await listed()).toBeNull();
  });

  it('refuses a bad filter with a 400 that names the bad part, and stores nothing', async () => {
    const cases: [unknown, string][] = [
      [
        { path: 'status', eq: 'x' },
        'filter.path: must start with data, event_type, event_id, timestamp or version (got "status")',
      ],
      [
        {
          and: [
            { path: 'data.a', eq: 1 },
            { path: 'data.b', gt: 'x' },
          ],
        },
        'filter.and[1].gt: must be a number',
      ],
      [
        'data.status == "x"',
        'filter: must be an object such as {"path": "data.status", "eq": "unavailable"} or {"and": [...]}',
      ],
    ];
    for (const [filter, problem] of cases) {
      const res = await call('POST', '/vendors/v1/webhooks', {
        event_type: 'EVENT_TYPE_MACHINE_UPDATED',
        callback_url: 'https://vendor.example.com/h',
        filter,
      });
      expect({ filter, status: res.statusCode, error: res.json<{ error: string }>().error }).toEqual({
        filter,
        status: 400,
        error: `Invalid request body: ${problem}`,
      });
    }
    expect((await call('GET', '/vendors/v1/webhooks')).json<{ webhooks: unknown[] }>().webhooks).toEqual([]);
    const id = await register();
    const patch = await call('PATCH', `/vendors/v1/webhooks/${id}`, { filter: { path: 'data.x', like: 'y' } });
    expect(patch.statusCode).toBe(400);
    expect(patch.json<{ error: string }>().error).toMatch(/^Invalid request body: filter: unknown field "like"/);
  });

  it('filter-test: the webhook’s filter on the sample, a proposed filter on a given event, and why', async () => {
    const available = {
      and: [
        { path: 'data.status', eq: 'available' },
        { path: 'data.gpu.model', in: ['A100', 'H100'] },
      ],
    };
    const id = await register(available);
    const test = (body: object) => call('POST', `/vendors/v1/webhooks/${id}/filter-test`, body);

    // The catalogue's sample of EVENT_TYPE_MACHINE_UPDATED: a machine that became unavailable.
    const onSample = await test({});
    expect(onSample.statusCode).toBe(200);
    const sample = onSample.json<{
      matched: boolean;
      source: string;
      filter: unknown;
      explanation: { parts: { test: string; matched: boolean }[] };
    }>();
    expect(sample).toMatchObject({ webhook_id: id, matched: false, source: 'sample', filter: available });
    expect(sample.explanation.parts[0]).toEqual({
      test: 'data.status == "available"',
      matched: false,
      found_kind: 'value',
      found: 'unavailable',
    });

    const event = { event_type: 'EVENT_TYPE_MACHINE_UPDATED', data: { status: 'available', gpu: { model: 'H100' } } };
    const given = await test({ event });
    expect(given.json()).toMatchObject({
      matched: true,
      source: 'request',
      event,
      explanation: {
        matched: true,
        test: 'all of 2',
        parts: [
          { matched: true, test: 'data.status == "available"', found_kind: 'value', found: 'available' },
          { matched: true, test: 'data.gpu.model in ["A100","H100"]', found_kind: 'value', found: 'H100' },
        ],
      },
    });
    const proposed = await test({ event, filter: { path: 'data.region', exists: true } });
    expect(proposed.json()).toMatchObject({
      matched: false,
      explanation: { test: 'data.region exists true', found_kind: 'missing' },
    });
    expect((await test({ event, filter: null })).json()).toMatchObject({
      matched: true,
      filter: null,
      explanation: null,
    });
    // Nothing was stored.
    expect(
      (await call('GET', '/vendors/v1/webhooks')).json<{ webhooks: { filter: unknown }[] }>().webhooks[0]!.filter,
    ).toEqual(available);
  });

  it('filter-test: clear 400s, and other vendors’ webhooks are not found', async () => {
    const id = await register();
    const url = `/vendors/v1/webhooks/${id}/filter-test`;
    const bad = async (body: unknown) => (await call('POST', url, body)).json<{ error: string }>();
    expect(await bad({ event: { status: 'x' } })).toMatchObject({
      error: expect.stringContaining('event must be an object with data') as string,
    });
    expect(await bad({ event: [1] })).toMatchObject({
      error: expect.stringContaining('event must be an object with data') as string,
    });
    expect(await bad({ filter: { path: 'data.a' } })).toMatchObject({
      error: expect.stringContaining('filter: needs exactly one comparison') as string,
    });
    expect(await bad({ sample: true })).toMatchObject({ error: 'Invalid request body: unknown field "sample"' });
    expect(await bad({ recent: false })).toMatchObject({ error: 'Invalid request body: recent must be true' });
    // An event nested past what ingest takes: the answer echoes the event, so it is refused up front.
    const deep = await t.app.inject({
      method: 'POST',
      url,
      headers: { 'x-api-key': key, 'content-type': 'application/json' },
      payload: `{"event":{"data":{"x":${'['.repeat(20_000)}1${']'.repeat(20_000)}}}}`,
    });
    expect(deep.statusCode).toBe(400);
    expect(deep.json()).toEqual({
      error:
        'Invalid request body: event.data: nested more than 64 levels deep (objects and arrays within one another)',
      code: 'invalid_request',
    });
    // Recent events are kept for webhooks with a filter only; this one has none, and nothing was ingested.
    expect(await bad({ recent: true })).toMatchObject({
      error: 'No recent event for this webhook: they are kept, for a day, only for webhooks that have a filter',
    });
    const other = await t.keyFor(['vendor'], 'another-vendor');
    expect((await call('POST', url, {}, { 'x-api-key': other })).statusCode).toBe(404);
    expect((await call('POST', url, {}, {})).statusCode).toBe(401);
    expect((await call('POST', '/vendors/v1/webhooks/nope/filter-test', {})).statusCode).toBe(400);
  });
});

describe('payload filters at ingest (real Redis, real worker and receiver)', () => {
  let world: DeliveryWorld;
  let t: TestApp;
  let receiver: TestReceiver;
  let key: string;
  beforeEach(async () => {
    world = await startDeliveryWorld(VENDOR);
    ({ t, receiver, key } = world);
  });
  afterEach(async () => stopDeliveryWorld(world));

  /** A machine update with this status and GPU model, ingested over HTTP as a producer sends it. */
  const update = (status: string, model: string) => ({
    event_id: randomUUID(),
    event_type: 'EVENT_TYPE_MACHINE_UPDATED',
    vendor_id: VENDOR,
    data: { status, gpu: { model }, metadata: { machine_id: `m-${randomUUID().slice(0, 8)}` } },
  });

  it('delivers only the events the filter matches; the rest are accepted with no delivery and no failure', async () => {
    const producer = await t.keyFor(['events:write']);
    const res = await t.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: {
        event_type: 'EVENT_TYPE_MACHINE_UPDATED',
        callback_url: `${receiver.base}/filtered`,
        filter: UNAVAILABLE_GPU,
      },
    });
    const id = res.json<{ webhook_id: string }>().webhook_id;
    const events = [
      update('unavailable', 'H100'),
      update('available', 'H100'),
      update('unavailable', 'T4'),
      update('unavailable', 'A100'),
      { ...update('unavailable', 'H100'), data: { status: 'unavailable', metadata: { machine_id: 'm-no-gpu' } } },
    ];
    const ingested = await t.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': producer },
      payload: { events },
    });
    expect(ingested.statusCode, ingested.body).toBe(202);
    const results = ingested.json<{ results: { event_id: string; status: string; deliveries: number }[] }>().results;
    expect(results.map((r) => [r.status, r.deliveries])).toEqual([
      ['accepted', 1],
      ['accepted', 0],
      ['accepted', 0],
      ['accepted', 1],
      ['accepted', 0],
    ]);
    await waitFor(() => receiver.at('/filtered').length >= 2, 10_000, 'the two matching deliveries');
    await queuesDrained(t.queues);
    const got = receiver.at('/filtered').map((r) => (JSON.parse(r.body) as { event_id: string }).event_id);
    expect(got.sort()).toEqual([events[0]!.event_id, events[3]!.event_id].sort());
    // Nothing failed and nothing waits: filtered events never became deliveries.
    await deliveryLogCaughtUp(t);
    const deliveries = await t.deliveryLog.recent(id, 100);
    expect(deliveries.map((d) => d.status)).toEqual(['delivered', 'delivered']);

    // The dry run on the newest event ingest matched to the webhook: the batch's last, which the filter held back.
    const tryRecent = (body: object) =>
      t.app.inject({
        method: 'POST',
        url: `/vendors/v1/webhooks/${id}/filter-test`,
        headers: { 'x-api-key': key },
        payload: body,
      });
    const recent = await tryRecent({ recent: true });
    expect(recent.statusCode).toBe(200);
    expect(recent.json()).toMatchObject({
      source: 'recent',
      matched: false,
      event: { event_id: events[4]!.event_id, data: { metadata: { machine_id: 'm-no-gpu' } } },
      explanation: {
        parts: [
          { matched: true },
          { matched: false, test: 'data.gpu.model in ["A100","H100"]', found_kind: 'missing' },
        ],
      },
    });
    expect((await tryRecent({ recent: true, event: { data: {} } })).json()).toMatchObject({
      error: 'Invalid request body: give event or recent, not both',
    });

    // A changed filter applies within the webhook cache's 2 s; null delivers everything again.
    await t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${id}`,
      headers: { 'x-api-key': key },
      payload: { filter: null },
    });
    await waitFor(
      async () => {
        await t.ingestor.ingest([update('available', 'T4')], 'http');
        return receiver
          .at('/filtered')
          .some((r) => (JSON.parse(r.body) as { data: { status: string } }).data.status === 'available');
      },
      15_000,
      'an unfiltered delivery after the filter was removed',
    );
  });
});
