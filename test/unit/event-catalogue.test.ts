import { readFileSync } from 'node:fs';
import path from 'node:path';
import { Ajv2020 } from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';
import { describe, expect, it } from 'vitest';
import { envelopeSchema, parseEvent } from '../../src/domain/event.js';
import { eventCatalogue } from '../../src/domain/event-catalogue.js';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { explainFilter, parseFilter, type FilterExplanation } from '../../src/domain/filter.js';
import { filterViewSchema } from '../../src/domain/webhook.js';
import { FILTER_EXAMPLE } from '../../web/portal/src/filter-example.js';

const ajv = new Ajv2020({ allErrors: true, strict: false });
// ajv-formats is CommonJS: its plugin is the default export's `default`.
addFormats.default(ajv);

const catalogue = eventCatalogue();

describe('event catalogue', () => {
  it('lists the six event types once each, in the interface’s order, each with a description', () => {
    expect(catalogue.map((entry) => entry.event_type)).toEqual([...WEBHOOK_EVENT_TYPES]);
    for (const entry of catalogue) expect(entry.description, entry.event_type).toMatch(/^A (machine|deployment) .+\.$/);
  });

  it.each(catalogue.map((entry) => [entry.event_type, entry] as const))(
    '%s: the sample is a body the sender could send',
    (eventType, entry) => {
      expect(entry.sample.event_type).toBe(eventType);
      // The zod envelope the sender's bodies are tested against, and the JSON Schema vendors get from it.
      expect(envelopeSchema(eventType).safeParse(entry.sample).error).toBeUndefined();
      const validate = ajv.compile(entry.schema);
      expect(validate(entry.sample), JSON.stringify(validate.errors)).toBe(true);
      // The sample's data is one ingest accepts for this type, so such a body really comes out of the engine.
      const ingested = parseEvent(
        {
          event_id: entry.sample.event_id,
          event_type: eventType,
          vendor_id: 'v-1',
          timestamp: entry.sample.timestamp,
          data: entry.sample.data,
        },
        { acceptedAtMs: 0, newId: () => 'unused' },
      );
      expect(ingested.ok ? undefined : ingested.reason).toBeUndefined();
    },
  );

  it('has JSON Schemas that refuse what a webhook of the type never receives', () => {
    for (const entry of catalogue) {
      const validate = ajv.compile(entry.schema);
      const other = catalogue.find((e) => e.event_type !== entry.event_type)!;
      expect(validate({ ...entry.sample, event_type: other.event_type }), entry.event_type).toBe(false);
      expect(validate({ ...entry.sample, extra: 1 }), entry.event_type).toBe(false);
      const { data: _data, ...withoutData } = entry.sample;
      expect(validate(withoutData), entry.event_type).toBe(false);
    }
    const machineCreated = ajv.compile(catalogue[0]!.schema);
    expect(machineCreated({ ...catalogue[0]!.sample, data: { status: 'available', metadata: {} } })).toBe(false);
  });

  it('documents the envelope’s fields and the test event beside the real data', () => {
    const schema = catalogue[0]!.schema as {
      properties: Record<string, { description?: string; anyOf?: unknown[] }>;
      $defs?: Record<string, unknown>;
    };
    expect(Object.keys(schema.properties)).toEqual(['version', 'event_id', 'event_type', 'timestamp', 'data']);
    expect(schema.properties.event_id?.description).toContain('webhook-id');
    expect(schema.properties.data?.anyOf).toHaveLength(2);
    expect(Object.keys(schema.$defs ?? {})).toContain('Machine');
  });

  it('shows filter examples (docs, OpenAPI, portal) that name fields machine events really carry', () => {
    const docs = readFileSync(path.resolve(import.meta.dirname, '../../docs/receiving-webhooks.md'), 'utf8');
    const inDocs = /## Payload filters\n[^]*?```json\n([^]*?)```/.exec(docs)?.[1];
    const examples = {
      docs: JSON.parse(inDocs ?? 'null') as unknown,
      openapi: (filterViewSchema.meta()?.examples as unknown[] | undefined)?.[0],
      portal: FILTER_EXAMPLE,
    };
    const updated = catalogue.find((entry) => entry.event_type === 'EVENT_TYPE_MACHINE_UPDATED')!.sample;
    const comparisons = (node: FilterExplanation): FilterExplanation[] =>
      node.parts ? node.parts.flatMap(comparisons) : [node];
    for (const [where, example] of Object.entries(examples)) {
      const parsed = parseFilter(example);
      if (!parsed.ok) throw new Error(`${where}: ${parsed.problem}`);
      const explained = explainFilter(parsed.filter, updated);
      // Every path leads to a value of the sample, and the sample (an unavailable A100 machine) passes.
      expect(
        comparisons(explained).map((c) => [c.test, c.foundKind]),
        where,
      ).toEqual(comparisons(explained).map((c) => [c.test, 'value']));
      expect(explained.matched, where).toBe(true);
    }
    expect(examples.docs).toEqual(examples.portal);
    expect(examples.openapi).toEqual(examples.portal);
  });
});
