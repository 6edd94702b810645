import { spawn, spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { Writable } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createLogger } from '../../src/logger.js';
import {
  freeLoopbackPort,
  findRedisServerBinary,
  startRedisServer,
  type RedisServerHandle,
} from '../../src/embedded/redis-server.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { cleanEnv } from '../helpers/processes.js';
import { TestReceiver } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';

/** `name` (promtool, prometheus) on PATH, if any. */
function onPath(name: string): string | undefined {
  const found = spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' });
  return found.status === 0 ? found.stdout.trim() : undefined;
}
const promtool = () => onPath('promtool');

const SECRET = 'observability-canary-secret-5d1e';
const ROTATED_SECRET = 'observability-rotated-secret-77a0';
const REDIS_PASSWORD = 'observability-redis-password-c3f9';

type LogLine = Record<string, unknown> & { level: number; msg: string; event?: string };

/** Every line of a process's output as JSON; a line that is not JSON fails the test, naming it. */
function jsonLines(output: string): LogLine[] {
  return output
    .split('\n')
    .filter((line) => line !== '')
    .map((line) => {
      try {
        return JSON.parse(line) as LogLine;
      } catch {
        throw new Error(`a log line that is not JSON: ${line}`);
      }
    });
}

type Started = Awaited<ReturnType<typeof startCli>>;

/** `hookline <args>` on a test app's Redis and key prefix, logging JSON unless `extra` says otherwise. */
function startOn(t: TestApp, args: string[], extra: Record<string, string>, ready: RegExp): Promise<Started> {
  return startCli(
    args,
    {
      ...cleanEnv(),
      REDIS_URL: t.url,
      HOOKLINE_REDIS_PREFIX: t.prefix,
      HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
      HOOKLINE_LOG_FORMAT: 'json',
      ...extra,
    },
    ready,
  );
}

/** Ends a started process and what the test set up around it. */
async function stopAll(
  started: Started | undefined,
  ...others: ({ close(): Promise<void> } | undefined)[]
): Promise<void> {
  started?.child.kill('SIGKILL');
  await started?.exited;
  for (const other of others) await other?.close();
}

describe('a live engine’s metrics and logs after real deliveries', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let engine: Awaited<ReturnType<typeof startCli>>;
  let worker: Awaited<ReturnType<typeof startCli>>;
  let base: string;
  let workerMetricsUrl: string;
  let eventsKey: string;
  let vendorKey: string;
  let metricsText: string;
  const webhookIds: Record<'ok' | 'flaky' | 'gone', string> = { ok: '', flaky: '', gone: '' };

  beforeAll(async () => {
    expect(await findRedisServerBinary()).toBeDefined();
    t = await testApp({ queuePartitions: 2 });
    receiver = new TestReceiver();
    await receiver.start();
    receiver.script('/ok', { status: 200 });
    receiver.script('/flaky', { status: 500 }, { status: 200 });
    receiver.script('/gone', { status: 410 });
    const apiPort = await freeLoopbackPort();
    const metricsPort = await freeLoopbackPort();
    const env = {
      ...Object.fromEntries(
        Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'),
      ),
      // Redis's default user has no password, so it accepts any: the log must still never show it.
      REDIS_URL: t.url.replace('redis://', `redis://default:${REDIS_PASSWORD}@`),
      HOOKLINE_REDIS_PREFIX: t.prefix,
      HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
      HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
      HOOKLINE_QUEUE_PARTITIONS: '2',
      HOOKLINE_RETRY_SCHEDULE: '0s,200ms,200ms',
      HOOKLINE_API_PORT: String(apiPort),
      HOOKLINE_METRICS_PORT: String(metricsPort),
      HOOKLINE_LOG_FORMAT: 'json',
    };
    engine = await startCli(['start'], env, /delivery worker running/);
    base = `http://127.0.0.1:${apiPort}`;
    workerMetricsUrl = `http://127.0.0.1:${metricsPort}/metrics`;
    eventsKey = await t.keyFor(['events:write']);
    vendorKey = await t.keyFor(['vendor'], 'v-obs');

    const register = async (eventType: string, pathName: string) => {
      const res = await fetch(`${base}/vendors/v1/webhooks`, {
        method: 'POST',
        headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
        body: JSON.stringify({ event_type: eventType, callback_url: `${receiver.base}${pathName}`, secret: SECRET }),
      });
      expect(res.status).toBe(201);
      return ((await res.json()) as { webhook_id: string }).webhook_id;
    };
    webhookIds.ok = await register('EVENT_TYPE_MACHINE_CREATED', '/ok');
    webhookIds.flaky = await register('EVENT_TYPE_MACHINE_UPDATED', '/flaky');
    webhookIds.gone = await register('EVENT_TYPE_DEPLOYMENT_CREATED', '/gone');
    const events = [
      {
        event_id: randomUUID(),
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        vendor_id: 'v-obs',
        data: { status: 'available', metadata: { machine_id: 'm-obs-1' } },
      },
      {
        event_id: randomUUID(),
        event_type: 'EVENT_TYPE_MACHINE_UPDATED',
        vendor_id: 'v-obs',
        data: { status: 'unavailable', metadata: { machine_id: 'm-obs-1' } },
      },
      {
        event_id: randomUUID(),
        event_type: 'EVENT_TYPE_DEPLOYMENT_CREATED',
        vendor_id: 'v-obs',
        data: { deployment_id: 'd-obs', machine_id: 'm-obs-1', status: 'STATUS_PENDING' },
      },
      { event_type: 'EVENT_TYPE_MACHINE_CREATED', vendor_id: 'v-obs', data: { status: 'available' } },
    ];
    const posted = await fetch(`${base}/internal/v1/events`, {
      method: 'POST',
      headers: { 'x-api-key': eventsKey, 'content-type': 'application/json' },
      body: JSON.stringify({ events }),
    });
    expect(posted.status).toBe(202);
    await waitFor(
      () => receiver.at('/ok').length === 1 && receiver.at('/flaky').length === 2 && receiver.at('/gone').length === 1,
      15_000,
      'deliveries',
    );
    await fetch(`${base}/rental/v1/machines`, { headers: { 'x-api-key': vendorKey } });
    // Let the last attempts be counted before scraping.
    metricsText = await waitFor(
      async () => {
        const text = await (await fetch(`${base}/metrics`)).text();
        // Labelled counters start at 0, so wait for the values, not the series.
        return (
          /^hookline_webhooks_disabled_total\{reason="gone",role="all"\} 1$/m.test(text) &&
          /^hookline_deliveries_finished_total\{event_type="EVENT_TYPE_MACHINE_UPDATED",outcome="delivered",role="all"\} 1$/m.test(
            text,
          ) &&
          text
        );
      },
      10_000,
      'counted deliveries',
    );
    // A standalone worker, started after the deliveries so that they were all counted above.
    worker = await startCli(['worker'], env, /delivery worker running/);
  }, 90_000);

  afterAll(async () => {
    engine?.child.kill('SIGTERM');
    worker?.child.kill('SIGTERM');
    await engine?.exited;
    await worker?.exited;
    await receiver?.close();
    await t?.close();
  });

  const sample = (name: string, labels: Record<string, string>) => {
    const line = metricsText
      .split('\n')
      .find((l) => l.startsWith(`${name}{`) && Object.entries(labels).every(([k, v]) => l.includes(`${k}="${v}"`)));
    return line === undefined ? undefined : Number(line.split(' ').at(-1));
  };

  it('counts ingest, attempts, retries, outcomes, lag, disables and API requests with their labels', () => {
    expect(
      sample('hookline_events_ingested_total', {
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        source: 'http',
        result: 'accepted',
      }),
    ).toBe(1);
    expect(
      sample('hookline_events_ingested_total', { event_type: 'invalid', source: 'http', result: 'rejected' }),
    ).toBe(1);
    expect(
      sample('hookline_delivery_attempts_total', { event_type: 'EVENT_TYPE_MACHINE_UPDATED', outcome: 'http_5xx' }),
    ).toBe(1);
    expect(sample('hookline_delivery_retries_total', { event_type: 'EVENT_TYPE_MACHINE_UPDATED' })).toBe(1);
    expect(
      sample('hookline_deliveries_finished_total', { event_type: 'EVENT_TYPE_MACHINE_CREATED', outcome: 'delivered' }),
    ).toBe(1);
    expect(sample('hookline_webhooks_disabled_total', { reason: 'gone' })).toBe(1);
    expect(sample('hookline_webhooks_disabled_total', { reason: 'failing' })).toBe(0);
    expect(sample('hookline_dead_letters_total', { event_type: 'EVENT_TYPE_MACHINE_REMOVED' })).toBe(0);
    expect(sample('hookline_delivery_lag_seconds_count', { event_type: 'EVENT_TYPE_MACHINE_CREATED' })).toBe(1);
    expect(sample('hookline_delivery_attempt_duration_seconds_count', { outcome: 'delivered' })).toBeGreaterThanOrEqual(
      2,
    );
    expect(
      sample('hookline_http_requests_total', { route: '/internal/v1/events', method: 'POST', status: '202' }),
    ).toBe(1);
    expect(sample('hookline_http_requests_total', { route: '/rental/v1/machines', method: 'GET', status: '403' })).toBe(
      1,
    );
    expect(metricsText).toMatch(/^hookline_queue_jobs\{state="waiting",role="all"\} \d+$/m);
    expect(metricsText).toMatch(/^hookline_redis_up\{role="all"\} 1$/m);
    expect(metricsText).toMatch(/^hookline_deliveries_filtered_total\{role="all"\} 0$/m);
    expect(metricsText).toMatch(/^hookline_rate_limit_checks_total\{result="sent",role="all"\} 0$/m);
    expect(metricsText).toMatch(/^hookline_build_info\{version="[^"]+",role="all"\} 1$/m);
    expect(metricsText).toMatch(/^process_cpu_seconds_total\{role="all"\} /m);
    expect(metricsText).toMatch(/^nodejs_eventloop_lag_p99_seconds\{role="all"\} /m);
  });

  it('never puts an id, URL, key or secret in a label', () => {
    for (const forbidden of [SECRET, eventsKey, vendorKey, receiver.base, 'v-obs', 'm-obs-1'])
      expect(metricsText).not.toContain(forbidden);
  });

  it('serves the standalone worker’s metrics on its own port', async () => {
    const text = await (await fetch(workerMetricsUrl)).text();
    expect(text).toMatch(/^hookline_redis_up\{role="worker"\} 1$/m);
    expect(text).toContain('hookline_queue_jobs{state="delayed",role="worker"}');
  });

  it('passes promtool check metrics', () => {
    const tool = promtool();
    if (!tool) {
      if (process.env.CI) throw new Error('promtool is required in CI (apt-get install prometheus)');
      console.warn('promtool not installed; skipping the check');
      return;
    }
    const result = spawnSync(tool, ['check', 'metrics'], { input: metricsText, encoding: 'utf8' });
    expect(`${result.stdout}${result.stderr}`.trim()).toBe('');
    expect(result.status).toBe(0);
  });

  it('names in dashboards and alert rules all exist in the live /metrics', async () => {
    const helper = path.resolve(import.meta.dirname, '../helpers/dashboard-metrics.ts');
    expect(existsSync(helper)).toBe(true);
    const { metricNamesUsedInDashboards } = (await import('../helpers/dashboard-metrics.js')) as {
      metricNamesUsedInDashboards: () => string[];
    };
    const exported = new Set([...metricsText.matchAll(/^# TYPE (\S+) /gm)].map((m) => m[1]));
    const names = metricNamesUsedInDashboards();
    expect(names.length).toBeGreaterThan(10);
    expect(names.filter((name) => !exported.has(name))).toEqual([]);
  });

  it('answers every dashboard panel’s and alert rule’s query on a real Prometheus that scraped this engine', async (ctx) => {
    const binary = onPath('prometheus');
    if (binary === undefined) {
      if (process.env.CI) throw new Error('prometheus is required in CI (apt-get install prometheus)');
      return ctx.skip('prometheus not installed (Debian: apt-get install -y prometheus); skipping');
    }
    // Traffic for the vendor portal row: a link issued, traded for a session, refused the second
    // time, and the session signed out; another link issued and revoked.
    const issuerKey = await t.keyFor(['portal:issue']);
    const issue = async () => {
      const res = await fetch(`${base}/admin/v1/portal/sessions`, {
        method: 'POST',
        headers: { 'x-api-key': issuerKey, 'content-type': 'application/json' },
        body: JSON.stringify({ vendor_id: 'v-obs' }),
      });
      expect(res.status).toBe(201);
      return (await res.json()) as { session_id: string; url: string };
    };
    const token = new URL((await issue()).url).hash.replace('#token=', '');
    const revoked = await fetch(`${base}/admin/v1/portal/sessions/${(await issue()).session_id}`, {
      method: 'DELETE',
      headers: { 'x-api-key': issuerKey },
    });
    expect(revoked.status).toBe(204);
    const signIn = () =>
      fetch(`${base}/portal/v1/session`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'sec-fetch-site': 'same-origin' },
        body: JSON.stringify({ token }),
      });
    const opened = await signIn();
    expect(opened.status).toBe(200);
    const { csrf_token: csrf } = (await opened.json()) as { csrf_token: string };
    expect((await signIn()).status).toBe(401);
    const signedOut = await fetch(`${base}/portal/v1/session`, {
      method: 'DELETE',
      headers: {
        cookie: (opened.headers.get('set-cookie') ?? '').split(';')[0] ?? '',
        'x-csrf-token': csrf,
        'sec-fetch-site': 'same-origin',
      },
    });
    expect(signedOut.status).toBe(204);

    const { dashboardExpressions, dashboardFiles, ruleExpressions, ALERT_RULES_FILE } =
      await import('../helpers/dashboard-metrics.js');
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-prometheus-'));
    const port = await freeLoopbackPort();
    writeFileSync(
      path.join(dir, 'prometheus.yml'),
      JSON.stringify({
        global: { scrape_interval: '1s' },
        scrape_configs: [
          { job_name: 'hookline-api', static_configs: [{ targets: [new URL(base).host] }] },
          { job_name: 'hookline-worker', static_configs: [{ targets: [new URL(workerMetricsUrl).host] }] },
        ],
      }),
    );
    const prometheus = spawn(
      binary,
      [
        `--config.file=${path.join(dir, 'prometheus.yml')}`,
        `--storage.tsdb.path=${path.join(dir, 'data')}`,
        `--web.listen-address=127.0.0.1:${port}`,
        '--log.level=warn',
      ],
      { stdio: 'ignore' },
    );
    const query = async (expr: string) => {
      const res = await fetch(`http://127.0.0.1:${port}/api/v1/query?query=${encodeURIComponent(expr)}`).catch(
        () => undefined,
      );
      return (await res?.json()) as { status: string; error?: string; data?: { result: unknown[] } } | undefined;
    };
    try {
      // Both processes scraped a few times, so that a rate over a few seconds has samples.
      await waitFor(
        async () => {
          const scrapes = await query('count_over_time(up[1m]) >= 4 and up == 1');
          return scrapes?.data?.result.length === 2;
        },
        30_000,
        'four scrapes of the API and the worker',
        250,
      );
      const expressions = [
        ...dashboardFiles().flatMap((file) => dashboardExpressions(JSON.parse(readFileSync(file, 'utf8')))),
        ...ruleExpressions(readFileSync(ALERT_RULES_FILE, 'utf8')),
      ].filter((e) => !e.startsWith('label_values('));
      const answers = await Promise.all(
        expressions.map(async (expr) => {
          const promql = expr
            .replace(/\$__(rate_interval|interval|range)\b/g, '4s')
            .replace(/\$\{?job\}?/g, 'hookline-api|hookline-worker');
          const answer = await query(promql);
          return { expr, status: answer?.status, error: answer?.error, series: answer?.data?.result.length ?? 0 };
        }),
      );
      const empty = answers.filter((a) => a.status === 'success' && a.series === 0).map((a) => a.expr);
      console.log(`prometheus: ${answers.length} queries, ${empty.length} without series:\n${empty.join('\n')}`);
      expect(answers.filter((a) => a.status !== 'success')).toEqual([]);
      // The panels this run gives traffic to show it: a query that matches nothing is a wrong
      // name, label or value, which Prometheus answers with an empty result rather than an error.
      const shown = (title: RegExp) => {
        const dashboard = JSON.parse(readFileSync(dashboardFiles()[0] ?? '', 'utf8')) as {
          panels: { title?: string; targets?: { expr: string }[] }[];
        };
        const panel = dashboard.panels.find((p) => title.test(p.title ?? ''));
        expect(panel, String(title)).toBeDefined();
        return (panel?.targets ?? []).map((target) => target.expr);
      };
      for (const expr of [
        ...shown(/^Ingest rate by result$/),
        ...shown(/^Attempts by outcome$/),
        ...shown(/^Webhooks disabled$/),
        ...shown(/^Portal sessions issued and revoked$/),
        ...shown(/^Portal sign-ins$/),
        // Read from Redis at every scrape, 0 with no FIFO line: they answer without FIFO traffic.
        ...shown(/^FIFO lines waiting$/),
        ...shown(/^FIFO oldest head waiting$/),
      ])
        expect(empty, expr).not.toContain(expr);
    } finally {
      const exited = new Promise((resolve) => prometheus.once('exit', resolve));
      if (prometheus.exitCode === null && prometheus.signalCode === null) {
        prometheus.kill('SIGKILL');
        await exited;
      }
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);

  it('logs one wide line per attempt and per batch, with no key, secret or signature', () => {
    const lines = jsonLines(`${engine.output()}${worker.output()}`);
    const attempts = lines.filter((l) => l.msg === 'delivery.attempted');
    // At the default level, the failed attempts: /flaky's 500 and /gone's 410.
    expect(attempts.length).toBeGreaterThanOrEqual(2);
    for (const line of attempts) {
      expect([
        typeof line.eventId,
        typeof line.webhookId,
        typeof line.deliveryId,
        typeof line.attempt,
        typeof line.outcome,
        typeof line.durationMs,
      ]).toEqual(['string', 'string', 'string', 'number', 'string', 'number']);
    }
    expect(attempts.some((l) => l.outcome === 'http_5xx' && l.status === 500)).toBe(true);
    const batches = lines.filter((l) => l.msg === 'ingest.batch');
    expect(batches).toEqual([
      expect.objectContaining({ source: 'http', events: 4, accepted: 3, rejected: 1, deliveries: 3 }),
    ]);
    const all = `${engine.output()}${worker.output()}`;
    const signatures = receiver.requests.flatMap((r) => [
      String(r.headers['webhook-signature']),
      String(r.headers['x-webhook-signature']),
    ]);
    for (const forbidden of [
      SECRET,
      eventsKey,
      vendorKey,
      t.secretKey.toString('base64'),
      REDIS_PASSWORD,
      ...signatures,
    ])
      expect(all).not.toContain(forbidden);
  });

  it('writes exactly one line per failed attempt at warn and none for a delivered one at the default level (info; delivered attempts are debug), and one per request', () => {
    const lines = jsonLines(engine.output());
    const attempts = lines.filter((l) => l.event === 'delivery.attempted');
    // Every line naming a delivery is one of its attempts: nothing else is logged per attempt.
    for (const attempt of attempts)
      expect(lines.filter((l) => l.deliveryId === attempt.deliveryId).length).toBe(
        attempts.filter((a) => a.deliveryId === attempt.deliveryId).length,
      );
    const delivered = attempts.filter((l) => l.outcome === 'delivered');
    const failed = attempts.filter((l) => l.outcome !== 'delivered');
    console.log(
      `log lines: ${lines.length} in all; ${delivered.length} delivered attempts, ${failed.length} failed, ${receiver.requests.length} requests received`,
    );
    // One line per failed request the receiver got (/flaky's first, /gone's), and no other line per attempt.
    const failedRequests = receiver.at('/flaky').length - 1 + receiver.at('/gone').length;
    expect(failedRequests).toBe(2);
    expect(attempts.length).toBe(failedRequests);
    expect(delivered).toEqual([]);
    expect(failed.map((l) => [l.outcome, l.level])).toEqual(
      expect.arrayContaining([
        ['http_5xx', 40],
        ['http_4xx', 40],
      ]),
    );
    expect(failed.every((l) => l.level === 40)).toBe(true);
    expect(failed.find((l) => l.outcome === 'http_4xx')).toMatchObject({
      webhookDisabled: 'gone',
      decision: 'disable',
    });
    // One line per request: each request id appears once.
    const requestIds = lines.filter((l) => l.reqId !== undefined).map((l) => l.reqId);
    expect(new Set(requestIds).size).toBe(requestIds.length);
    expect(lines.filter((l) => l.url === '/internal/v1/events')).toEqual([
      expect.objectContaining({
        event: 'ingest.batch',
        status: 202,
        keyId: expect.stringMatching(/^key_/) as unknown,
        keyName: 'test events:write',
      }),
    ]);
  });

  it('starts with one line saying what an operator must know, with the SSRF guard off at warn and Redis without credentials', () => {
    const [first] = jsonLines(engine.output());
    expect(first).toMatchObject({
      level: 40,
      event: 'hookline.started',
      role: 'all',
      version: expect.stringMatching(/^\d+\.\d+\.\d+/) as unknown,
      api: base,
      redis: t.url,
      redisSource: 'REDIS_URL',
      ssrfGuard: 'off',
      traces: 'off',
      retrySchedule: '0s,200ms,200ms',
      attempts: 3,
      partitions: 2,
      workerConcurrency: 50,
      deliveryTimeout: '15s',
    });
    expect(first?.msg).toContain('SSRF guard OFF');
    const [workerFirst] = jsonLines(worker.output());
    expect(workerFirst).toMatchObject({
      event: 'hookline.started',
      role: 'worker',
      health: workerMetricsUrl.replace(/\/metrics$/, ''),
      ssrfGuard: 'off',
    });
    expect(workerFirst).not.toHaveProperty('api');
  });

  it('logs webhook changes with the key that made them and the webhook, never the secret', async () => {
    const patch = async (id: string, body: Record<string, unknown>) => {
      const res = await fetch(`${base}/vendors/v1/webhooks/${id}`, {
        method: 'PATCH',
        headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
        body: JSON.stringify(body),
      });
      expect(res.status).toBe(200);
    };
    await patch(webhookIds.ok, { secret: ROTATED_SECRET });
    await patch(webhookIds.gone, { enabled: true });
    await patch(webhookIds.flaky, { callback_url: `${receiver.base}/flaky?token=callback-token-1` });
    expect(
      (
        await fetch(`${base}/vendors/v1/webhooks/${webhookIds.gone}`, {
          method: 'DELETE',
          headers: { 'x-api-key': vendorKey },
        })
      ).status,
    ).toBe(204);
    const audited = await waitFor(
      () => {
        const found = jsonLines(engine.output()).filter(
          (l) => typeof l.event === 'string' && l.event.startsWith('webhook.'),
        );
        return found.length >= 7 && found;
      },
      10_000,
      'the audit lines',
    );
    const by = { keyId: expect.stringMatching(/^key_/) as unknown, keyName: 'test vendor', vendorId: 'v-obs' };
    expect(audited.map((l) => [l.event, l.webhookId])).toEqual([
      ['webhook.created', webhookIds.ok],
      ['webhook.created', webhookIds.flaky],
      ['webhook.created', webhookIds.gone],
      ['webhook.secret_rotated', webhookIds.ok],
      ['webhook.enabled', webhookIds.gone],
      ['webhook.updated', webhookIds.flaky],
      ['webhook.deleted', webhookIds.gone],
    ]);
    for (const line of audited) expect(line).toMatchObject({ level: 30, ...by });
    expect(audited[0]).toMatchObject({
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${receiver.base}/ok`,
      secretSet: true,
    });
    expect(audited[3]).toMatchObject({ changed: ['secret'], secretRotated: true });
    expect(audited[5]).toMatchObject({
      changed: ['callback_url'],
      callbackUrl: `${receiver.base}/flaky?token=[redacted]`,
    });
    const output = engine.output();
    for (const forbidden of [SECRET, ROTATED_SECRET, 'callback-token-1', vendorKey])
      expect(output).not.toContain(forbidden);
  });
});

describe('request URLs in a live engine’s logs', () => {
  let t: TestApp;
  let engine: Started;
  let base: string;

  beforeAll(async () => {
    t = await testApp();
    const apiPort = await freeLoopbackPort();
    engine = await startOn(
      t,
      ['start'],
      { HOOKLINE_API_PORT: String(apiPort), HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()) },
      /delivery worker running/,
    );
    base = `http://127.0.0.1:${apiPort}`;
  }, 90_000);
  afterAll(async () => stopAll(engine, t));

  it('never writes a query string value, such as a key a client put in the URL, to any log line', async () => {
    const keyInUrl = await t.keyFor(['vendor'], 'v-leak');
    const headerKey = await t.keyFor(['vendor'], 'v-leak');
    const urlOf = (line: Record<string, unknown>) => line.url as string | undefined;
    const lines = () => jsonLines(engine.output());

    expect((await fetch(`${base}/vendors/v1/webhooks?api_key=${keyInUrl}`)).status).toBe(401);
    expect((await fetch(`${base}/rental/v1/machines?api_key=${keyInUrl}&page=1`)).status).toBe(401);
    await fetch(`${base}/vendors/v1/webhooks?token=secret-value&x=1`, { headers: { 'x-api-key': headerKey } });
    expect((await fetch(`${base}/no/such/route?api_key=${keyInUrl}`)).status).toBe(404);
    // Every request logged its one line.
    const logged = await waitFor(
      () => {
        const ours = lines().filter((l) =>
          /^\/(vendors\/v1\/webhooks|rental\/v1\/machines|no\/such\/route)\?/.test(urlOf(l) ?? ''),
        );
        return ours.length >= 4 && ours;
      },
      10_000,
      'the request log lines',
    );
    const output = engine.output();
    console.log(`request urls logged: ${logged.map(urlOf).join(' ')}`);
    for (const secret of [keyInUrl, keyInUrl.slice(3), encodeURIComponent(keyInUrl), 'secret-value'])
      expect(output).not.toContain(secret);
    expect(logged.map(urlOf)).toEqual([
      '/vendors/v1/webhooks?api_key=[redacted]',
      '/rental/v1/machines?api_key=[redacted]&page=[redacted]',
      '/vendors/v1/webhooks?token=[redacted]&x=[redacted]',
      '/no/such/route?api_key=[redacted]',
    ]);
  });

  it('does not log health probes at info', async () => {
    for (let i = 0; i < 3; i++) {
      expect((await fetch(`${base}/healthz`)).status).toBe(200);
      await fetch(`${base}/readyz`);
      await fetch(`${base}/metrics`);
    }
    // A request after the probes: once its line is in the log, the probes' lines would be too.
    await fetch(`${base}/rental/v1/machines?probe-marker=1`);
    await waitFor(() => engine.output().includes('probe-marker='), 10_000, 'the request after the probes logged');
    const probeLines = jsonLines(engine.output()).filter(
      (l) => l.url === '/healthz' || l.url === '/readyz' || l.url === '/metrics',
    );
    expect(probeLines).toEqual([]);
  });
});

describe('a live engine’s pretty log (what a terminal shows)', () => {
  let t: TestApp;
  let receiver: TestReceiver;
  let engine: Started | undefined;
  afterAll(async () => stopAll(engine, receiver, t));

  it('writes one line per record: an attempt and a request are one line each, as in JSON', async () => {
    t = await testApp();
    receiver = new TestReceiver();
    await receiver.start();
    const apiPort = await freeLoopbackPort();
    engine = await startOn(
      t,
      ['start'],
      {
        HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
        HOOKLINE_API_PORT: String(apiPort),
        HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
        HOOKLINE_LOG_FORMAT: 'pretty',
        // A delivered attempt's line is at debug.
        HOOKLINE_LOG_LEVEL: 'debug',
      },
      /delivery worker running/,
    );
    const running = engine;
    const vendorKey = await t.keyFor(['vendor'], 'v-pretty');
    const registered = await fetch(`http://127.0.0.1:${apiPort}/vendors/v1/webhooks`, {
      method: 'POST',
      headers: { 'x-api-key': vendorKey, 'content-type': 'application/json' },
      body: JSON.stringify({ event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: `${receiver.base}/pretty` }),
    });
    const { webhook_id: webhookId } = (await registered.json()) as { webhook_id: string };
    expect(
      (
        await fetch(`http://127.0.0.1:${apiPort}/vendors/v1/webhooks/${webhookId}/test`, {
          method: 'POST',
          headers: { 'x-api-key': vendorKey },
        })
      ).status,
    ).toBe(202);
    await waitFor(() => running.output().includes('delivery.attempted'), 10_000, 'the attempt logged');
    running.child.kill('SIGTERM');
    expect(await running.exited).toBe(0);

    const lines = running
      .output()
      .split('\n')
      .filter((l) => l !== '');
    console.log(`pretty log: ${lines.length} lines`);
    for (const line of lines) expect(line).toMatch(/^\[\d\d:\d\d:\d\d\.\d{3}\] (TRACE|DEBUG|INFO|WARN|ERROR|FATAL): /);
    expect(lines.filter((l) => l.includes('delivery.attempted'))).toEqual([
      expect.stringMatching(/ DEBUG: delivery\.attempted/),
    ]);
    expect(lines.filter((l) => l.includes(webhookId)).map((l) => /: ([\w.]+)/.exec(l)?.[1])).toEqual([
      'webhook.created',
      'webhook.test_sent',
      'delivery.attempted',
    ]);
  }, 60_000);
});

describe('an API with HOOKLINE_METRICS_ON_API_PORT=false', () => {
  let t: TestApp;
  let api: Started | undefined;
  afterAll(async () => stopAll(api, t));

  it('serves /metrics on HOOKLINE_METRICS_PORT only, so the API port can be published without it', async () => {
    t = await testApp();
    const [apiPort, metricsPort] = [await freeLoopbackPort(), await freeLoopbackPort()];
    api = await startOn(
      t,
      ['api'],
      {
        HOOKLINE_API_PORT: String(apiPort),
        HOOKLINE_METRICS_PORT: String(metricsPort),
        HOOKLINE_METRICS_ON_API_PORT: 'false',
      },
      /Hookline API listening/,
    );
    const apiBase = `http://127.0.0.1:${apiPort}`;
    const metricsBase = `http://127.0.0.1:${metricsPort}`;
    expect((await fetch(`${apiBase}/metrics`)).status).toBe(404);
    expect((await fetch(`${apiBase}/healthz`)).status).toBe(200);
    const scraped = await fetch(`${metricsBase}/metrics`);
    expect(scraped.status).toBe(200);
    expect(await scraped.text()).toMatch(
      /^hookline_http_requests_total\{route="\/healthz",method="GET",status="200",role="api"\} 1$/m,
    );
    expect((await fetch(`${metricsBase}/readyz`)).status).toBe(200);
    expect(jsonLines(api.output())[0]).toMatchObject({
      event: 'hookline.started',
      role: 'api',
      api: apiBase,
      health: metricsBase,
      metrics: `${metricsBase}/metrics`,
    });
  });
});

describe('a live engine’s log through a Redis outage', () => {
  let dir: string;
  let redis: RedisServerHandle | undefined;
  let engine: Awaited<ReturnType<typeof startCli>> | undefined;

  afterAll(async () => {
    engine?.child.kill('SIGKILL');
    await engine?.exited;
    await redis?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  it('logs the outage once each way, as JSON: no raw ioredis traces, no line per reconnect attempt', async () => {
    const binary = await findRedisServerBinary();
    if (!binary) throw new Error('redis-server is required');
    dir = mkdtempSync(path.join(tmpdir(), 'hookline-outage-'));
    // AOF, so the ingest stream's consumer group is still there when Redis comes back.
    redis = await startRedisServer({ binary, port: 0, dir, appendOnly: true });
    const port = redis.port;
    const apiPort = await freeLoopbackPort();
    engine = await startCli(
      ['start'],
      {
        ...cleanEnv(),
        REDIS_URL: redis.url,
        HOOKLINE_SECRET_KEY: Buffer.alloc(32, 9).toString('base64'),
        HOOKLINE_API_PORT: String(apiPort),
        HOOKLINE_LOG_FORMAT: 'json',
      },
      /delivery worker running/,
    );
    const running = engine;
    const logged = (event: string) => jsonLines(running.output()).filter((l) => l.event === event);

    await redis.stop();
    await waitFor(() => logged('redis.unreachable').length > 0, 10_000, 'the outage logged');
    // Every connection retries several times meanwhile: each /readyz waits up to a second for a PING.
    let refused = 0;
    await waitFor(
      async () => (await fetch(`http://127.0.0.1:${apiPort}/readyz`)).status === 503 && ++refused >= 4,
      20_000,
      'four refused readiness probes',
    );
    redis = await startRedisServer({ binary, port, dir, appendOnly: true });
    await waitFor(() => logged('redis.restored').length > 0, 15_000, 'the recovery logged');
    running.child.kill('SIGTERM');
    expect(await running.exited).toBe(0);

    const lines = jsonLines(running.output());
    console.log(`outage log: ${lines.map((l) => l.event ?? l.msg).join(', ')}`);
    expect(logged('redis.unreachable')).toEqual([expect.objectContaining({ level: 40, redis: redis.url })]);
    expect(logged('redis.restored')).toHaveLength(1);
    expect(
      lines
        .filter((l) => l.level >= 40)
        .map((l) => l.event ?? l.msg)
        .sort(),
    ).toEqual(['delivery.sends_paused', 'redis.unreachable']);
  }, 60_000);
});

describe('log redaction', () => {
  it('blanks keys, secrets and credential headers wherever they appear', () => {
    const chunks: string[] = [];
    const sink = new Writable({ write: (chunk: Buffer, _enc, done) => (chunks.push(chunk.toString()), done()) });
    const logger = createLogger({ level: 'info', format: 'json', fd: 1, destination: sink });
    logger.info(
      {
        req: { headers: { 'x-api-key': 'hk_leak1', authorization: 'Bearer leak2', cookie: 'leak3' } },
        secret: 'leak4',
        webhook: { secret: 'leak5' },
        apiKey: 'leak6',
        secretKey: 'leak7',
      },
      'hello',
    );
    const out = chunks.join('');
    for (const leak of ['hk_leak1', 'leak2', 'leak3', 'leak4', 'leak5', 'leak6', 'leak7'])
      expect(out).not.toContain(leak);
    expect(out).toContain('[redacted]');
  });
});
