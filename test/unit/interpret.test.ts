import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { SendResult } from '../../src/delivery/outbound/http-sender.js';
import { interpret, READINGS, type Interpretation, type Reading } from '../../src/delivery/interpret.js';
import { failure, response } from '../helpers/send-results.js';

const NOW = Date.UTC(2025, 0, 2, 3, 4, 5);

type Expected = Omit<Interpretation, 'answered'>;
const meaning = (
  outcome: Expected['outcome'],
  action: Expected['action'],
  health: Expected['health'],
  flow: Expected['flow'],
  retryAfterMs?: number,
) => ({
  outcome,
  action,
  health,
  flow,
  retryAfterMs,
});

describe('interpret: what an answer means, for the delivery, the breaker, the concurrency limit and the next attempt', () => {
  it.each<[string, SendResult, Expected]>([
    ['200', response(200), meaning('delivered', 'delivered', 'healthy', 'ok')],
    ['204 with a Retry-After (ignored)', response(204, '5'), meaning('delivered', 'delivered', 'healthy', 'ok')],
    ['299', response(299), meaning('delivered', 'delivered', 'healthy', 'ok')],
    ['301', response(301), meaning('http_3xx', 'retry', 'healthy', 'ok')],
    ['400', response(400), meaning('http_4xx', 'retry', 'healthy', 'ok')],
    ['404 with a Retry-After (ignored)', response(404, '5'), meaning('http_4xx', 'retry', 'healthy', 'ok')],
    ['410', response(410), meaning('http_4xx', 'disable', 'healthy', 'ok')],
    ['429', response(429), meaning('http_4xx', 'retry', 'healthy', 'congested')],
    ['429, Retry-After 7', response(429, '7'), meaning('http_4xx', 'retry', 'healthy', 'congested', 7_000)],
    ['429, Retry-After 0', response(429, '0'), meaning('http_4xx', 'retry', 'healthy', 'congested', 0)],
    ['429, a malformed Retry-After', response(429, 'soon'), meaning('http_4xx', 'retry', 'healthy', 'congested')],
    ['500', response(500), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['500 with a Retry-After (ignored)', response(500, '5'), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['502', response(502), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['503', response(503), meaning('http_5xx', 'retry', 'failed', 'congested')],
    [
      '503, Retry-After an HTTP date 90 s ahead',
      response(503, 'Thu, 02 Jan 2025 03:05:35 GMT'),
      meaning('http_5xx', 'retry', 'failed', 'congested', 90_000),
    ],
    ['599', response(599), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['600', response(600), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['199', response(199), meaning('http_5xx', 'retry', 'failed', 'neutral')],
    ['timeout', failure('timeout'), meaning('timeout', 'retry', 'timeout', 'congested')],
    ['connect', failure('connect'), meaning('connect', 'retry', 'failed', 'congested')],
    ['network', failure('network'), meaning('network', 'retry', 'failed', 'congested')],
    ['dns', failure('dns'), meaning('dns', 'retry', 'failed', 'neutral')],
    ['tls', failure('tls'), meaning('tls', 'retry', 'failed', 'neutral')],
    ['ssrf_blocked', failure('ssrf_blocked'), meaning('ssrf_blocked', 'retry', 'healthy', 'neutral')],
    ['circuit_open', failure('circuit_open'), meaning('circuit_open', 'retry', 'healthy', 'neutral')],
  ])('%s', (_name, result, expected) => {
    const { outcome, action, health, flow, retryAfterMs, answered } = interpret(result, NOW);
    expect({ outcome, action, health, flow, retryAfterMs }).toEqual(expected);
    // Only an HTTP response, of any status, is an answer other workers may learn of.
    expect(answered).toBe(result.kind === 'response');
  });

  it('answers with the table row itself unless a Retry-After is honoured (no allocation per attempt)', () => {
    expect(READINGS).toContain(interpret(response(200), NOW));
    expect(READINGS).toContain(interpret(response(429), NOW));
    expect(READINGS).toContain(interpret(failure('timeout'), NOW));
    expect(READINGS).not.toContain(interpret(response(429, '1'), NOW));
  });

  it('has one row per answer name, and honours Retry-After exactly on 429 and 503', () => {
    const names = READINGS.map((r) => r.answer);
    expect(new Set(names).size).toBe(names.length);
    expect(READINGS.filter((r) => r.honoursRetryAfter).map((r) => r.answer)).toEqual(['429', '503']);
  });
});

/** The table as docs/receiving-webhooks.md shows it, rendered from the rows. */
function markdownTable(rows: readonly Reading[]): string {
  const then = { delivered: 'delivered', disable: 'webhook disabled', retry: 'retried' } as const;
  const health = { healthy: '—', failed: 'failure', timeout: 'timeout' } as const;
  const flow = { ok: '—', congested: 'halved', neutral: '—' } as const;
  const lines = [
    '| Answer | Logged as | The delivery | The endpoint’s circuit | Its concurrency limit | Retry-After | |',
    '|---|---|---|---|---|---|---|',
    ...rows.map(
      (r) =>
        `| \`${r.answer}\` | \`${r.outcome}\` | ${then[r.action]} | ${health[r.health]} | ${flow[r.flow]} | ${r.honoursRetryAfter ? 'honoured' : '—'} | ${r.description} |`,
    ),
  ];
  return lines.join('\n');
}

describe('docs/receiving-webhooks.md shows the table interpret reads answers by', () => {
  it('word for word', () => {
    const doc = readFileSync(path.resolve(import.meta.dirname, '../../docs/receiving-webhooks.md'), 'utf8');
    expect(doc).toContain(markdownTable(READINGS));
  });
});
