import { randomUUID } from 'node:crypto';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES, type WebhookEventType } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { agent, sampleEvent } from '../helpers/ingest-app.js';
import { servedDocument, type OpenApiDocument, type OpenApiOperation } from '../helpers/openapi.js';
import { TestReceiver, type ReceivedRequest } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const VENDOR = 'vendor-openapi';
const SECRET = `whsec_${Buffer.from('openapi-webhooks-test-secret-32b').toString('base64')}`;
/** What the connection itself carries, not the engine's documented headers. */
const TRANSPORT_HEADERS = new Set([
  'host',
  'connection',
  'content-length',
  'content-type',
  'transfer-encoding',
  'keep-alive',
]);

/** A JSON Schema validator over the document's schemas: `#/components/schemas/X` refs point into `$defs`. */
function documentValidator(doc: OpenApiDocument) {
  // Not strict: the linters judge the schemas themselves; this only checks values against them.
  const ajv = new Ajv2020({ allErrors: true, strict: false });
  // ajv-formats is CommonJS: its plugin is the default export's `default`.
  addFormats.default(ajv);
  const rewrite = (value: unknown): unknown =>
    JSON.parse(JSON.stringify(value).replaceAll('"#/components/schemas/', '"#/$defs/'));
  const defs = rewrite(doc.components.schemas) as Record<string, object>;
  return (schema: object, value: unknown): string[] => {
    const validate = ajv.compile({ ...(rewrite(schema) as object), $defs: defs });
    return validate(value)
      ? []
      : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? 'is invalid'}`);
  };
}

/** What is wrong with a received request, measured against a documented webhook operation; empty when it conforms. */
function problems(
  check: ReturnType<typeof documentValidator>,
  operation: OpenApiOperation,
  request: ReceivedRequest,
): string[] {
  const found: string[] = [];
  const bodySchema = operation.requestBody?.content['application/json']?.schema;
  if (!bodySchema) return ['no application/json request body documented'];
  found.push(...check(bodySchema, JSON.parse(request.body)).map((p) => `body ${p}`));
  const documented = new Map(
    (operation.parameters ?? []).filter((p) => p.in === 'header').map((p) => [p.name.toLowerCase(), p]),
  );
  for (const [name, parameter] of documented) {
    const value = request.headers[name];
    if (value === undefined) {
      if (parameter.required) found.push(`header ${name} missing`);
      continue;
    }
    found.push(...check(parameter.schema, value).map((p) => `header ${name} ${p}`));
  }
  for (const name of Object.keys(request.headers)) {
    if (!TRANSPORT_HEADERS.has(name) && !documented.has(name)) found.push(`header ${name} sent but not documented`);
  }
  return found;
}

describe('the webhooks section of the OpenAPI document (real deliveries to a real receiver)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let worker: TestWorker;
  let key: string;
  let doc: OpenApiDocument;
  const webhookIds = new Map<WebhookEventType, string>();

  beforeAll(async () => {
    t = await testApp({ retryScheduleMs: [0] });
    receiver = new TestReceiver();
    await receiver.start();
    key = await t.keyFor(['vendor'], VENDOR);
    worker = await startTestWorker(t);
    doc = await servedDocument(t.app);
    for (const eventType of WEBHOOK_EVENT_TYPES) {
      const res = await t.app.inject({
        method: 'POST',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': key },
        payload: { event_type: eventType, callback_url: `${receiver.base}/${eventType}`, secret: SECRET },
      });
      expect(res.statusCode).toBe(201);
      webhookIds.set(eventType, res.json<{ webhook_id: string }>().webhook_id);
    }
  });
  afterAll(async () => {
    await worker.close();
    await receiver.close();
    await t.close();
  });

  it('documents one signed POST per event type', () => {
    expect(Object.keys(doc.webhooks ?? {}).sort()).toEqual([...WEBHOOK_EVENT_TYPES].sort());
    for (const eventType of WEBHOOK_EVENT_TYPES) {
      const operation = doc.webhooks?.[eventType]?.post;
      expect(operation?.requestBody?.content['application/json']?.schema, eventType).toBeDefined();
      expect(operation?.parameters?.map((p) => p.name).sort(), eventType).toEqual(
        [
          'user-agent',
          'webhook-id',
          'webhook-signature',
          'webhook-timestamp',
          'x-webhook-attempt',
          'x-webhook-event',
          'x-webhook-signature',
        ].sort(),
      );
      expect(Object.keys(operation?.responses ?? {}).sort(), eventType).toEqual(
        ['2XX', '410', '429', '503', 'default'].sort(),
      );
      for (const status of ['429', '503'])
        expect(operation?.responses[status]?.headers, `${eventType} ${status}`).toHaveProperty('Retry-After');
    }
  });

  it('every delivery a receiver gets, of each event type and a test event, matches the documented request of its type', async () => {
    const events: object[] = WEBHOOK_EVENT_TYPES.map((eventType) => sampleEvent(eventType, VENDOR));
    // Data as producers may send it: a field the schema does not name (delivered as sent), and a
    // deployment without the fields ingest fills in with defaults.
    events.push({
      ...sampleEvent('EVENT_TYPE_MACHINE_UPDATED', VENDOR),
      data: { ...sampleEvent('EVENT_TYPE_MACHINE_UPDATED', VENDOR).data, rack: 'r12' },
    });
    events.push({
      ...sampleEvent('EVENT_TYPE_DEPLOYMENT_UPDATED', VENDOR),
      data: { deployment_id: 'dep-2', machine_id: 'm-2', status: 'STATUS_PENDING' },
    });
    const results = await t.ingestor.ingest(events, 'http');
    expect(results.map((r) => r.status)).toEqual(events.map(() => 'accepted'));
    const test = await t.app.inject({
      method: 'POST',
      url: `/vendors/v1/webhooks/${webhookIds.get('EVENT_TYPE_DEPLOYMENT_STOPPED')}/test`,
      headers: { 'x-api-key': key },
    });
    expect(test.statusCode).toBe(202);
    const expected = events.length + 1;
    await waitFor(() => receiver.requests.length >= expected, 15_000, `${expected} deliveries`);

    const check = documentValidator(doc);
    const found = receiver.requests.map((request) => {
      const eventType = request.path.slice(1) as WebhookEventType;
      const operation = doc.webhooks?.[eventType]?.post;
      return {
        eventType,
        problems: operation ? problems(check, operation, request) : ['no webhook documented for this path'],
      };
    });
    expect(found.filter((f) => f.problems.length > 0)).toEqual([]);
    expect(found.map((f) => f.eventType).sort()).toEqual(
      [
        ...WEBHOOK_EVENT_TYPES,
        'EVENT_TYPE_MACHINE_UPDATED',
        'EVENT_TYPE_DEPLOYMENT_UPDATED',
        'EVENT_TYPE_DEPLOYMENT_STOPPED',
      ].sort(),
    );
    // The test event really was among them.
    expect(receiver.requests.some((r) => (JSON.parse(r.body) as { data: { test?: boolean } }).data.test === true)).toBe(
      true,
    );
  });

  it('refuses what a delivery of another type or shape would carry', async () => {
    const eventId = randomUUID();
    await t.ingestor.ingest([sampleEvent('EVENT_TYPE_MACHINE_CREATED', VENDOR, { event_id: eventId })], 'http');
    const request = await waitFor(
      () => receiver.requests.find((r) => r.body.includes(eventId)),
      15_000,
      'the machine delivery',
    );
    const check = documentValidator(doc);
    const machineCreated = doc.webhooks!.EVENT_TYPE_MACHINE_CREATED!.post!;
    const deploymentCreated = doc.webhooks!.EVENT_TYPE_DEPLOYMENT_CREATED!.post!;
    expect(problems(check, machineCreated, request)).toEqual([]);
    // The same request against another type's documentation: wrong event_type, data and header.
    expect(problems(check, deploymentCreated, request).join('\n')).toMatch(/event_type[\s\S]*x-webhook-event/);
    // A machine event whose data is a deployment's, and an envelope with a field it never has.
    const body = JSON.parse(request.body) as Record<string, unknown>;
    expect(
      problems(check, machineCreated, {
        ...request,
        body: JSON.stringify({ ...body, data: agent('dep-9', 'STATUS_RUNNING') }),
      }),
    ).not.toEqual([]);
    expect(problems(check, machineCreated, { ...request, body: JSON.stringify({ ...body, extra: 1 }) })).not.toEqual(
      [],
    );
    expect(problems(check, machineCreated, { ...request, headers: { ...request.headers, 'x-unlisted': '1' } })).toEqual(
      ['header x-unlisted sent but not documented'],
    );
  });
});
