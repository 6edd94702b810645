import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { TracingConfig } from '../../src/config/otel.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { capturedLogs } from '../helpers/logs.js';
import { OtlpReceiver } from '../helpers/otlp-receiver.js';
import { TestReceiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-traces';
const SERVER = 2;
const CLIENT = 3;
const CONSUMER = 5;
const ERROR = 2;

const hex = (bytes: number) => randomBytes(bytes).toString('hex');
/** A producer's span: a fresh trace id and span id, sampled or not. */
const producerSpan = (sampled = true) => ({ traceId: hex(16), spanId: hex(8), sampled });
const traceparent = (s: { traceId: string; spanId: string; sampled: boolean }) =>
  `00-${s.traceId}-${s.spanId}-${s.sampled ? '01' : '00'}`;

interface Attempt {
  attempt: number;
  outcome: string;
  trace_id: string | null;
  request_headers: Record<string, string> | null;
}

function deploymentEvent(eventId = randomUUID()) {
  return {
    event_id: eventId,
    event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
    vendor_id: VENDOR,
    data: { deployment_id: `d-${eventId.slice(0, 8)}`, machine_id: 'm-1', status: 'STATUS_RUNNING', fail_reason: '' },
  };
}

describe('OpenTelemetry traces from the producer to the receiver (real Redis, real receivers, an OTLP/HTTP receiver)', () => {
  const collector = new OtlpReceiver();
  let collectorUrl: string;
  const receiver = new TestReceiver();
  const logs = capturedLogs();
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  let key: string;
  let savedDelay: string | undefined;

  beforeAll(async () => {
    // The batch span processor exports every 5 s by default: sooner here, so the test waits less.
    savedDelay = process.env.OTEL_BSP_SCHEDULE_DELAY;
    process.env.OTEL_BSP_SCHEDULE_DELAY = '100';
    collectorUrl = await collector.start();
    await receiver.start();
  });
  afterAll(async () => {
    if (savedDelay === undefined) delete process.env.OTEL_BSP_SCHEDULE_DELAY;
    else process.env.OTEL_BSP_SCHEDULE_DELAY = savedDelay;
    await receiver.close();
    await collector.close();
  });
  afterEach(async () => {
    await worker?.close();
    await t?.close();
    worker = undefined;
    t = undefined;
    logs.clear();
  });

  async function start(
    tracing: TracingConfig | undefined,
    settings: { ingestStream?: boolean } = {},
  ): Promise<TestApp> {
    t = await testApp({ retryScheduleMs: [0, 150, 150], ...(tracing === undefined ? {} : { tracing }) });
    key = await t.keyFor(['vendor'], VENDOR);
    worker = await startTestWorker(t, {
      logger: logs.logger(),
      ...settings,
      breaker: { failureThreshold: 1_000, failureRate: 1, minAttempts: 1_000, openMs: 200, openMsMax: 200 },
    });
    return t;
  }

  const config = (protocol: TracingConfig['protocol'], sampler: TracingConfig['sampler'] = 'parentbased_always_on') =>
    ({
      url: `${collectorUrl}/v1/traces`,
      protocol,
      headers: { authorization: 'Bearer collector-token' },
      serviceName: 'hookline-under-test',
      sampler,
      samplerRatio: 1,
    }) satisfies TracingConfig;

  async function register(app: TestApp, path: string, extra: object = {}): Promise<string> {
    const res = await app.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': key },
      payload: { event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED', callback_url: `${receiver.base}${path}`, ...extra },
    });
    expect(res.statusCode, res.body).toBe(201);
    const webhookId = res.json<{ webhook_id: string }>().webhook_id;
    const read = await app.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${webhookId}`,
      headers: { 'x-api-key': key },
    });
    expect(read.json<{ propagate_trace: boolean }>().propagate_trace).toBe(
      (extra as { propagate_trace?: boolean }).propagate_trace ?? false,
    );
    return webhookId;
  }

  async function ingestOverHttp(app: TestApp, events: object[], headers: Record<string, string> = {}) {
    const producer = await app.keyFor(['events:write']);
    const res = await app.app.inject({
      method: 'POST',
      url: '/internal/v1/events',
      headers: { 'x-api-key': producer, ...headers },
      payload: { events },
    });
    expect(res.statusCode, res.body).toBe(202);
  }

  async function attemptsOf(app: TestApp, webhookId: string, eventId: string, count: number): Promise<Attempt[]> {
    return waitFor(
      async () => {
        const list = await app.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${webhookId}/deliveries?status=delivered`,
          headers: { 'x-api-key': key },
        });
        const found = list
          .json<{ deliveries: { delivery_id: string; event_id: string }[] }>()
          .deliveries.find((d) => d.event_id === eventId);
        if (!found) return undefined;
        const res = await app.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${webhookId}/deliveries/${found.delivery_id}`,
          headers: { 'x-api-key': key },
        });
        const attempts = res.json<{ attempts: Attempt[] }>().attempts;
        return attempts.length === count && attempts;
      },
      15_000,
      `${count} recorded attempts of ${eventId}`,
    );
  }

  const spansOf = (traceId: string) => collector.spans.filter((s) => s.traceId === traceId);

  it('http/protobuf: the producer’s traceparent → the ingest span → one client span per attempt → the receiver’s traceparent; trace_id in the log line and the delivery log', async () => {
    const app = await start(config('http/protobuf'));
    const webhookId = await register(app, '/traced?token=query-secret', { propagate_trace: true });
    receiver.script('/traced?token=query-secret', { status: 503 }, { status: 200 });
    const producer = producerSpan();
    const event = deploymentEvent();
    await ingestOverHttp(app, [event], { traceparent: traceparent(producer), tracestate: 'vendor=abc' });

    const attempts = await attemptsOf(app, webhookId, event.event_id, 2);
    expect(attempts.map((a) => a.outcome)).toEqual(['http_5xx', 'delivered']);
    expect(attempts.map((a) => a.trace_id)).toEqual([producer.traceId, producer.traceId]);

    // The spans: the ingest span under the producer's, the attempts under the ingest span.
    const spans = await waitFor(
      () => {
        const found = spansOf(producer.traceId);
        return found.length >= 3 && found;
      },
      15_000,
      'the three spans of the trace',
    );
    const ingest = spans.find((s) => s.kind === SERVER)!;
    expect(ingest).toMatchObject({
      name: 'POST /internal/v1/events',
      parentSpanId: producer.spanId,
      // The producer's tracestate is continued as given.
      traceState: 'vendor=abc',
      attributes: {
        'http.request.method': 'POST',
        'http.route': '/internal/v1/events',
        'hookline.ingest.events': 1,
        'hookline.ingest.accepted': 1,
        'hookline.ingest.deliveries': 1,
      },
      resource: { 'service.name': 'hookline-under-test' },
    });
    const sent = spans.filter((s) => s.kind === CLIENT).sort((a, b) => a.startMs - b.startMs);
    expect(sent).toHaveLength(2);
    const port = Number(new URL(receiver.base).port);
    for (const [i, span] of sent.entries()) {
      expect(span.parentSpanId).toBe(ingest.spanId);
      expect(span.name).toBe('POST');
      expect(span.attributes).toMatchObject({
        'http.request.method': 'POST',
        // The query (which may hold a token) is left out.
        'url.full': `${receiver.base}/traced`,
        'server.address': '127.0.0.1',
        'server.port': port,
        'hookline.webhook.id': webhookId,
        'hookline.vendor.id': VENDOR,
        'hookline.event.id': event.event_id,
        'hookline.attempt': i + 1,
      });
    }
    expect(sent[0]!.attributes).toMatchObject({
      'http.response.status_code': 503,
      'hookline.outcome': 'http_5xx',
      'hookline.decision': 'retry',
      'error.type': '503',
    });
    expect(sent[0]!.status.code).toBe(ERROR);
    expect(sent[0]!.events.map((e) => e.name)).toEqual(['retry scheduled']);
    expect(sent[1]!.attributes).toMatchObject({
      'http.response.status_code': 200,
      'hookline.outcome': 'delivered',
      'hookline.decision': 'delivered',
      'http.request.resend_count': 1,
    });
    expect(sent[1]!.status.code).not.toBe(ERROR);
    expect(JSON.stringify(collector.spans)).not.toContain('query-secret');

    // The receiver got each attempt's own span as its parent; the delivery log shows the header.
    const received = receiver.at('/traced?token=query-secret');
    expect(received.map((r) => r.headers.traceparent)).toEqual(
      sent.map((s) => `00-${producer.traceId}-${s.spanId}-01`),
    );
    expect(attempts.map((a) => a.request_headers?.traceparent)).toEqual(received.map((r) => r.headers.traceparent));
    // With the producer's tracestate beside it, as given (W3C: the state travels with the trace).
    expect(received.map((r) => r.headers.tracestate)).toEqual(['vendor=abc', 'vendor=abc']);
    expect(attempts.map((a) => a.request_headers?.tracestate)).toEqual(['vendor=abc', 'vendor=abc']);

    // The attempt's log line (the failed one is logged at warn) names the trace.
    const line = await waitFor(() =>
      logs.lines.find((l) => l.event === 'delivery.attempted' && l.eventId === event.event_id),
    );
    expect(line.traceId).toBe(producer.traceId);
    // The exporter sent the configured headers; they appear in no log line.
    expect(collector.exports[0]!.headers.authorization).toBe('Bearer collector-token');
    expect(collector.exports[0]!.contentType).toBe('application/x-protobuf');
    expect(JSON.stringify(logs.lines)).not.toContain('collector-token');
  });

  it('an unsampled producer trace is followed but not recorded; a webhook without propagate_trace gets no traceparent', async () => {
    const app = await start(config('http/protobuf'));
    const plain = await register(app, '/plain');
    const producer = producerSpan(false);
    const event = deploymentEvent();
    await ingestOverHttp(app, [event], { traceparent: traceparent(producer) });
    const [attempt] = await attemptsOf(app, plain, event.event_id, 1);
    expect(attempt!.trace_id).toBe(producer.traceId);
    expect(receiver.at('/plain').at(-1)!.headers.traceparent).toBeUndefined();
    expect(attempt!.request_headers!.traceparent).toBeUndefined();

    // A sampled event ingested after it is exported; by then the unsampled one would have been too.
    const later = producerSpan();
    const second = deploymentEvent();
    await ingestOverHttp(app, [second], { traceparent: traceparent(later) });
    await attemptsOf(app, plain, second.event_id, 1);
    await waitFor(() => spansOf(later.traceId).length >= 2, 15_000, 'the sampled trace’s spans');
    expect(spansOf(producer.traceId)).toEqual([]);
  });

  it('http/json from the ingest stream: a CONSUMER span per batch linked to each entry’s traceparent; an entry’s attempts join its own trace, an entry without one joins the batch’s', async () => {
    const exportsBefore = collector.exports.length;
    const app = await start(config('http/json'), { ingestStream: true });
    const webhookId = await register(app, '/streamed', { propagate_trace: true });
    const producer = producerSpan();
    const traced = deploymentEvent();
    const untraced = deploymentEvent();
    const stream = app.keys.events.streamOf(0);
    await app.redis.xadd(
      stream,
      '*',
      'event',
      JSON.stringify(traced),
      'traceparent',
      traceparent(producer),
      'tracestate',
      'congo=t61rcWkgMzE',
    );
    await app.redis.xadd(stream, '*', 'event', JSON.stringify(untraced), 'traceparent', 'not-a-traceparent');
    const [tracedAttempt] = await attemptsOf(app, webhookId, traced.event_id, 1);
    const [untracedAttempt] = await attemptsOf(app, webhookId, untraced.event_id, 1);
    expect(tracedAttempt!.trace_id).toBe(producer.traceId);
    // The entry's tracestate goes with its trace to the receiver; the other entry had none.
    const stateOf = (eventId: string) =>
      receiver.at('/streamed').find((r) => r.headers['webhook-id'] === eventId)?.headers.tracestate;
    expect([stateOf(traced.event_id), stateOf(untraced.event_id)]).toEqual(['congo=t61rcWkgMzE', undefined]);

    const batches = await waitFor(
      () => {
        const found = collector.spans.filter((s) => s.kind === CONSUMER);
        return found.length > 0 && found;
      },
      15_000,
      'the stream batch span',
    );
    const batch = batches.find((s) => s.links.some((l) => l.spanId === producer.spanId))!;
    expect(batch).toMatchObject({
      name: `process ${stream}`,
      parentSpanId: '',
      attributes: { 'messaging.operation.type': 'process', 'messaging.destination.name': stream },
    });
    expect(batch.links).toContainEqual({ traceId: producer.traceId, spanId: producer.spanId });

    const attemptIn = (traceId: string) =>
      waitFor(() => spansOf(traceId).find((s) => s.kind === CLIENT), 15_000, `the attempt span in ${traceId}`);
    expect((await attemptIn(producer.traceId)).parentSpanId).toBe(producer.spanId);
    // The entry whose traceparent was not valid: its attempt is in the batch span's trace, under it.
    const batchOf = batches.find((s) => s.traceId === untracedAttempt!.trace_id);
    expect(batchOf).toBeDefined();
    expect((await attemptIn(batchOf!.traceId)).parentSpanId).toBe(batchOf!.spanId);
    const exports = collector.exports.slice(exportsBefore);
    expect(exports.length).toBeGreaterThan(0);
    expect(exports.map((e) => e.contentType)).toEqual(exports.map(() => 'application/json'));
  });

  it('a deferral is a zero-length span in the event’s trace, with its reason; a FIFO webhook’s attempts join the trace too', async () => {
    const app = await start(config('http/protobuf'));
    const limited = await register(app, '/limited', { rate_limit_per_second: 1 });
    const producer = producerSpan();
    const events = [deploymentEvent(), deploymentEvent(), deploymentEvent()];
    await ingestOverHttp(app, events, { traceparent: traceparent(producer) });
    for (const event of events) await attemptsOf(app, limited, event.event_id, 1);
    const deferred = await waitFor(
      () => {
        const found = spansOf(producer.traceId).filter((s) => s.name === 'hookline.delivery.deferred');
        return found.length > 0 && found;
      },
      15_000,
      'a deferral span',
    );
    const ingest = spansOf(producer.traceId).find((s) => s.kind === SERVER)!;
    for (const span of deferred) {
      expect(span.parentSpanId).toBe(ingest.spanId);
      expect(span.attributes['hookline.deferral.reason']).toBe('rate_limited');
      expect(span.endMs).toBe(span.startMs);
    }

    const fifo = await register(app, '/fifo', { ordering: 'fifo', event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED' });
    const inLine = producerSpan();
    const stopped = { ...deploymentEvent(), event_type: 'EVENT_TYPE_DEPLOYMENT_STOPPED' };
    await ingestOverHttp(app, [stopped], { traceparent: traceparent(inLine) });
    const list = await waitFor(
      async () => {
        const res = await app.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${fifo}/deliveries?status=delivered`,
          headers: { 'x-api-key': key },
        });
        const found = res.json<{ deliveries: { event_id: string }[] }>().deliveries;
        return found.length === 1 && found;
      },
      15_000,
      'the FIFO delivery',
    );
    expect(list[0]!.event_id).toBe(stopped.event_id);
    const attempt = await waitFor(
      () => spansOf(inLine.traceId).find((s) => s.kind === CLIENT),
      15_000,
      'the FIFO attempt span',
    );
    expect(attempt.attributes['hookline.webhook.id']).toBe(fifo);
  });

  it('export off: nothing is exported, the producer’s context is still carried to the receiver and the delivery log, and a delivery without one gets a trace of its own', async () => {
    const app = await start(undefined);
    const webhookId = await register(app, '/off', { propagate_trace: true });
    receiver.script('/off', { status: 500 }, { status: 200 });
    const before = collector.spans.length;
    const producer = producerSpan();
    const event = deploymentEvent();
    await ingestOverHttp(app, [event], { traceparent: traceparent(producer), tracestate: 'rojo=00f067aa0ba902b7' });
    const traced = await attemptsOf(app, webhookId, event.event_id, 2);
    expect(traced.map((a) => a.trace_id)).toEqual([producer.traceId, producer.traceId]);
    // Passed on as it came: the receiver's span is a child of the producer's, with its state.
    expect(receiver.at('/off').map((r) => [r.headers.traceparent, r.headers.tracestate])).toEqual([
      [traceparent(producer), 'rojo=00f067aa0ba902b7'],
      [traceparent(producer), 'rojo=00f067aa0ba902b7'],
    ]);

    receiver.script('/off', { status: 500 }, { status: 200 });
    const bare = deploymentEvent();
    await ingestOverHttp(app, [bare]);
    const own = await attemptsOf(app, webhookId, bare.event_id, 2);
    const [first, second] = receiver
      .at('/off')
      .slice(2)
      .map((r) => String(r.headers.traceparent));
    const traceIdOf = (header: string) => header.split('-')[1];
    // One trace for the delivery's attempts, each attempt a span of its own, not sampled.
    expect(traceIdOf(first!)).toBe(traceIdOf(second!));
    expect(first).not.toBe(second);
    expect(first).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-00$/);
    // No producer's trace, no state to pass on.
    expect(
      receiver
        .at('/off')
        .slice(2)
        .map((r) => r.headers.tracestate),
    ).toEqual([undefined, undefined]);
    expect(own.map((a) => a.trace_id)).toEqual([traceIdOf(first!), traceIdOf(first!)]);
    expect(collector.spans.length).toBe(before);
  });

  it('PATCH turns propagate_trace on and off; a bad value is a 400', async () => {
    const app = await start(undefined);
    const webhookId = await register(app, '/patched');
    const patch = (payload: object) =>
      app.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${webhookId}`,
        headers: { 'x-api-key': key },
        payload,
      });
    expect((await patch({ propagate_trace: true })).json<{ propagate_trace: boolean }>().propagate_trace).toBe(true);
    const bad = await patch({ propagate_trace: 'yes' });
    expect(bad.statusCode).toBe(400);
    expect(bad.json<{ error: string }>().error).toContain('propagate_trace');
    expect((await patch({ propagate_trace: false })).json<{ propagate_trace: boolean }>().propagate_trace).toBe(false);
  });
});
