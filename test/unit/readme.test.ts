import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { loadConfig } from '../../src/config/env.js';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { Webhook } from '../../src/domain/webhook.js';
import { TestEventSender } from '../../src/tasks/test-event.js';

const root = path.resolve(import.meta.dirname, '../..');
const readme = readFileSync(path.join(root, 'README.md'), 'utf8');
/** The README's quick start: from its heading to the next top-level section. */
const quickStart = readme.slice(
  readme.indexOf('## Quick start'),
  readme.indexOf('\n## ', readme.indexOf('## Quick start') + 1),
);
/** The JSON bodies of the webhook registrations in the quick start (`curl … -d '{"event_type": …}'`; ingest bodies hold `events`). */
const registrations = [...quickStart.matchAll(/-d '(\{"event_type":[^']*\})'/g)].map(
  (m) => JSON.parse(m[1] ?? '') as { event_type: string; callback_url: string },
);

describe('README quick start', () => {
  it('registers each event type once (a vendor has one webhook per type; a second registration answers 409)', () => {
    expect(registrations.length).toBeGreaterThanOrEqual(2);
    const types = registrations.map((r) => r.event_type);
    expect(new Set(types).size).toBe(types.length);
  });

  it('points a webhook at the demo receiver it tells how to run, on the receiver’s default port', () => {
    const receiver = readFileSync(path.join(root, 'examples/demo-receiver/receiver.mjs'), 'utf8');
    const port = /process\.env\.PORT \?\? (\d+)/.exec(receiver)?.[1];
    expect(quickStart).toContain('node examples/demo-receiver/receiver.mjs');
    expect(registrations.map((r) => r.callback_url)).toContainEqual(
      expect.stringMatching(new RegExp(`^http://127\\.0\\.0\\.1:${port}/`)),
    );
  });

  it('shows the test event as it is sent', async () => {
    const jobs: DeliverJob[] = [];
    const sender = new TestEventSender({
      queues: { add: async (added) => void jobs.push(...added) },
      log: { recordQueued: async () => undefined },
      nowMs: () => 0,
    });
    await sender.send({ id: 'w', vendorId: 'v', eventType: 'EVENT_TYPE_MACHINE_CREATED' } as Webhook);
    const sent = (JSON.parse(jobs[0]?.body ?? '{}') as { data: unknown }).data;
    const shown = /\{"version":"1\.0".*"data":(\{.*\})\}\n/.exec(quickStart)?.[1];
    expect(JSON.parse(shown ?? 'null')).toEqual(sent);
    // The API table describes the same data.
    expect(readFileSync(path.join(root, 'docs/api.md'), 'utf8')).toContain(
      `with \`data: ${JSON.stringify(sent).replaceAll('":', '": ').replaceAll(',"', ', "')}\``,
    );
  });

  it('shows retries and dead letters with a retry schedule that parses', () => {
    const schedule = /HOOKLINE_RETRY_SCHEDULE=(\S+)/.exec(quickStart)?.[1];
    expect(loadConfig({ HOOKLINE_RETRY_SCHEDULE: schedule }).retryScheduleMs).toEqual([0, 2_000, 4_000]);
    expect(quickStart).toContain('FAIL_RATE=1');
    expect(quickStart).toContain('dlq list --webhook');
  });
});
