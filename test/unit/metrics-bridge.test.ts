import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { createMetrics } from '../../src/metrics/metrics.js';
import { requestObserver, sendRateObserver, seriesAtStart, storageGateObserver } from '../../src/metrics/observers.js';

const src = path.resolve(import.meta.dirname, '../../src');

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) return sourceFiles(full);
    return entry.name.endsWith('.ts') ? [full] : [];
  });
}

async function valueOf(
  metrics: ReturnType<typeof createMetrics>,
  name: string,
  labels: Record<string, string> = {},
): Promise<number | undefined> {
  const metric = (await metrics.registry.getMetricsAsJSON()).find((m) => m.name === name);
  const matches = (sample: { labels: Partial<Record<string, string | number>> }) =>
    Object.entries(labels).every(([key, value]) => sample.labels[key] === value);
  return metric?.values.find(matches)?.value;
}

describe('metrics reach prom-client only through src/metrics/', () => {
  it('no module outside src/metrics/ updates a metric', () => {
    const names = Object.keys(createMetrics({ role: 'test', defaultMetrics: false })).filter(
      (name) => name !== 'registry',
    );
    const update = new RegExp(`\\.(${names.join('|')})\\??\\.(inc|dec|set|observe|reset|startTimer)\\(`);
    const offenders = sourceFiles(src)
      .filter((file) => !file.startsWith(path.join(src, 'metrics') + path.sep))
      .flatMap((file) =>
        readFileSync(file, 'utf8')
          .split('\n')
          .map((line, index) => ({ line, index }))
          .filter(({ line }) => update.test(line))
          .map(({ index }) => `${path.relative(src, file)}:${index + 1}`),
      );
    expect(offenders).toEqual([]);
  });
});

describe('observers of the engine and the API', () => {
  it('seriesAtStart sets the build info and shows counters at zero before their first event', async () => {
    const metrics = createMetrics({ role: 'test', defaultMetrics: false });
    seriesAtStart(metrics, '9.9.9');
    expect(await valueOf(metrics, 'hookline_build_info', { version: '9.9.9' })).toBe(1);
    expect(await valueOf(metrics, 'hookline_rate_limit_checks_total', { result: 'deferred' })).toBe(0);
  });

  it('storageGateObserver shows sends paused while the gate is shut', async () => {
    const metrics = createMetrics({ role: 'test', defaultMetrics: false });
    const observe = storageGateObserver(metrics);
    observe(false);
    expect(await valueOf(metrics, 'hookline_delivery_sends_paused')).toBe(1);
    observe(true);
    expect(await valueOf(metrics, 'hookline_delivery_sends_paused')).toBe(0);
  });

  it('sendRateObserver counts sent and deferred answers apart', async () => {
    const metrics = createMetrics({ role: 'test', defaultMetrics: false });
    const observe = sendRateObserver(metrics);
    observe(true);
    observe(true);
    observe(false);
    expect(await valueOf(metrics, 'hookline_rate_limit_checks_total', { result: 'sent' })).toBe(2);
    expect(await valueOf(metrics, 'hookline_rate_limit_checks_total', { result: 'deferred' })).toBe(1);
  });

  it('requestObserver counts a request by route pattern and records its duration in seconds', async () => {
    const metrics = createMetrics({ role: 'test', defaultMetrics: false });
    requestObserver(metrics)({ route: '/v1/webhooks/:id', method: 'GET', status: 404, durationMs: 12 });
    expect(
      await valueOf(metrics, 'hookline_http_requests_total', {
        route: '/v1/webhooks/:id',
        method: 'GET',
        status: '404',
      }),
    ).toBe(1);
    const duration = (await metrics.registry.getMetricsAsJSON()).find(
      (m) => m.name === 'hookline_http_request_duration_seconds',
    );
    const sum = duration?.values.find(
      (v) => (v as { metricName?: string }).metricName === 'hookline_http_request_duration_seconds_sum',
    );
    expect(sum?.value).toBeCloseTo(0.012);
  });
});
