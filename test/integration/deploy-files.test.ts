import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it, type TestContext } from 'vitest';
import semver from 'semver';
import { parse } from 'yaml';
import { loadConfig } from '../../src/config/env.js';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import {
  dashboardExpressions,
  dashboardFiles,
  metricNamesInExpression,
  metricNamesUsedInDashboards,
  ruleExpressions,
} from '../helpers/dashboard-metrics.js';
import { buildAsNpmStart, withBuildLock } from '../helpers/build-lock.js';
import { runCli } from '../helpers/cli.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
/** The configuration's defaults: the ports the images and compose file must agree with. */
const DEFAULTS = loadConfig({});
const ENGINES = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { engines: { node: string } })
  .engines.node;
/** A `node:<major>…` image whose Node the package supports (its `engines`) and that is a long-term-support line (even major). */
const supportedNodeImage = (image: string): boolean => {
  const major = Number(/^node:(\d+)/.exec(image)?.[1]);
  return major % 2 === 0 && semver.satisfies(`${major}.99.0`, ENGINES);
};
const read = (file: string) => readFileSync(path.join(ROOT, file), 'utf8');
// Compose files use YAML merge keys (`<<: *anchor`), a YAML 1.1 feature the parser enables on request.
const readYaml = <T>(file: string) => parse(read(file), { merge: true }) as T;

interface HealthCheck {
  test: string[] | string;
}
interface Service {
  image?: string;
  build?: string | { context: string; dockerfile?: string };
  command?: string[] | string;
  environment?: Record<string, string>;
  ports?: string[];
  expose?: string[];
  volumes?: (string | { type: string; source: string; target: string })[];
  depends_on?: Record<string, { condition: string }> | string[];
  healthcheck?: HealthCheck;
}
interface Compose {
  services: Record<string, Service>;
  volumes?: Record<string, unknown>;
}
interface PrometheusConfig {
  global: { scrape_interval: string };
  rule_files: string[];
  scrape_configs: {
    job_name: string;
    static_configs?: { targets: string[] }[];
    dns_sd_configs?: { names: string[]; type: string; port: number }[];
  }[];
}
interface Panel {
  id: number;
  type: string;
  title?: string;
  gridPos: { x: number; y: number; w: number; h: number };
  datasource?: { uid: string };
  targets?: { expr?: string; datasource?: { uid: string } }[];
  panels?: Panel[];
}
interface Dashboard {
  uid: string;
  schemaVersion: number;
  panels: Panel[];
  templating: { list: { name: string; type: string; query: unknown }[] };
}
interface AlertRule {
  alert?: string;
  record?: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

const compose = readYaml<Compose>('docker-compose.yml');
const service = (name: string): Service => {
  const s = compose.services[name];
  if (!s) throw new Error(`no service ${name} in docker-compose.yml`);
  return s;
};
const healthTest = (s: Service) => [s.healthcheck?.test ?? []].flat().join(' ');
/** A service's environment as compose passes it from a shell that sets none of the variables it interpolates (`${X:-default}`). */
const composeEnvironment = (s: Service): Record<string, string> =>
  Object.fromEntries(
    Object.entries(s.environment ?? {}).map(([key, value]) => [
      key,
      String(value).replace(/\$\{\w+:-([^}]*)\}/g, (_match, fallback: string) => fallback),
    ]),
  );
const commandOf = (s: Service): string[] => [s.command ?? []].flat();

/** Bind mounts of a service as [host path relative to the repo, container path]. */
function bindMounts(s: Service): [string, string][] {
  return (s.volumes ?? []).flatMap((volume): [string, string][] => {
    if (typeof volume !== 'string') return volume.type === 'bind' ? [[volume.source, volume.target]] : [];
    const [source = '', target = ''] = volume.split(':');
    return source.startsWith('.') || source.startsWith('/') ? [[source, target]] : [];
  });
}

/** `docker compose` when the docker CLI has the compose plugin, else why not. */
function dockerCompose(): { ok: true } | { ok: false; why: string } {
  const version = spawnSync('docker', ['compose', 'version'], { encoding: 'utf8', timeout: 20_000 });
  if (version.error) return { ok: false, why: `docker CLI not found (${version.error.message})` };
  if (version.status !== 0)
    return {
      ok: false,
      why: `docker compose plugin not available: ${`${version.stderr}${version.stdout}`.trim().split('\n')[0]}`,
    };
  return { ok: true };
}

/** The promtool binary; in CI its absence fails the test, elsewhere it skips with a message. */
function promtool(ctx: TestContext): string {
  const probe = spawnSync('promtool', ['--version'], { encoding: 'utf8', timeout: 20_000 });
  if (!probe.error && probe.status === 0) return 'promtool';
  if (process.env.CI) throw new Error('promtool is required in CI (Debian: apt-get install -y prometheus)');
  const why = 'promtool not installed (Debian: apt-get install -y prometheus); skipping';
  console.warn(why);
  return ctx.skip(why);
}

function run(
  command: string,
  args: string[],
  options: { cwd?: string; env?: NodeJS.ProcessEnv; timeoutMs?: number } = {},
) {
  const result = spawnSync(command, args, {
    cwd: options.cwd ?? ROOT,
    env: options.env ?? process.env,
    encoding: 'utf8',
    timeout: options.timeoutMs ?? 60_000,
  });
  return { status: result.status, output: `${result.stdout ?? ''}${result.stderr ?? ''}`.trim() };
}

describe('docker-compose.yml', () => {
  it('runs Redis 7 or newer with AOF (fsync every second), noeviction, a volume and a PING health check', () => {
    const redis = service('redis');
    expect(Number(/^redis:(\d+)/.exec(redis.image ?? '')?.[1])).toBeGreaterThanOrEqual(7);
    const command = [redis.command ?? []].flat().join(' ');
    expect(command).toContain('--appendonly yes');
    expect(command).toContain('--appendfsync everysec');
    expect(command).toContain('--maxmemory-policy noeviction');
    expect(healthTest(redis)).toContain('redis-cli ping');
    const [volume] = (redis.volumes ?? []) as string[];
    expect(volume).toMatch(/^[\w-]+:\/data$/);
    expect(Object.keys(compose.volumes ?? {})).toContain(volume?.split(':')[0]);
  });

  it('runs the API from the Dockerfile with Redis, the secret key from the shell and a /healthz check', () => {
    const api = service('api');
    expect(api.build).toBeDefined();
    expect([api.command].flat()).toEqual(['api']);
    expect(api.environment).toMatchObject({ REDIS_URL: 'redis://redis:6379', HOOKLINE_API_HOST: '0.0.0.0' });
    expect(api.environment?.HOOKLINE_SECRET_KEY).toBe('${HOOKLINE_SECRET_KEY:-}');
    // Published and checked on the port the API listens on by default.
    expect(api.ports?.map((p) => String(p).split(':').at(-1))).toEqual([String(DEFAULTS.apiPort)]);
    expect(api.depends_on).toEqual({ redis: { condition: 'service_healthy' } });
    expect(healthTest(api)).toContain(`127.0.0.1:${DEFAULTS.apiPort}/healthz`);
  });

  it('serves no /metrics on a published port: Prometheus scrapes them on the compose network', () => {
    const scraped = readYaml<PrometheusConfig>('dashboards/prometheus/prometheus.yml').scrape_configs.flatMap((job) => [
      ...(job.static_configs ?? []).flatMap((c) => c.targets),
      ...(job.dns_sd_configs ?? []).flatMap((c) => c.names.map((name) => `${name}:${c.port}`)),
    ]);
    for (const [name, s] of Object.entries(compose.services)) {
      if (s.image !== service('api').image) continue;
      // Where this Hookline container serves /metrics, by its configuration.
      const config = loadConfig(composeEnvironment(s));
      const role = commandOf(s)[0];
      const metricsPorts = role === 'worker' || !config.metricsOnApiPort ? [config.metricsPort] : [config.apiPort];
      const published = (s.ports ?? []).map((p) => Number(String(p).split(':').at(-1)));
      expect(
        published.filter((port) => metricsPorts.includes(port)),
        `${name} publishes its /metrics port`,
      ).toEqual([]);
      // Prometheus reaches every one of them, and compose lets it.
      for (const port of metricsPorts) {
        expect(scraped, `${name}:${port} scraped`).toContain(`${name}:${port}`);
        expect(s.expose ?? [], `${name} exposes ${port}`).toContain(String(port));
      }
    }
    expect(service('api').environment?.HOOKLINE_METRICS_ON_API_PORT).toBe('false');
  });

  it('interpolates no required variable (`${X:?}`), so `docker compose logs`, `ps` and `down` work in any shell', () => {
    expect(read('docker-compose.yml')).not.toMatch(/\$\{\w+:?\?/);
  });

  it('leaves the refusal to the engine: the API’s configuration without HOOKLINE_SECRET_KEY stops with the reason', async () => {
    const environment = composeEnvironment(service('api'));
    expect(environment.HOOKLINE_SECRET_KEY).toBe('');
    const env = Object.fromEntries(
      Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKLINE_') && k !== 'REDIS_URL'),
    );
    const result = await runCli(commandOf(service('api')), { ...env, ...environment });
    expect(result.code).toBe(1);
    expect(result.stderr).toContain(
      'HOOKLINE_SECRET_KEY: required when REDIS_URL is set (32 random bytes in base64: openssl rand -base64 32)',
    );
  }, 60_000);

  it('runs scalable workers: same image, no host port, metrics port reachable, private targets for the demo only', () => {
    const api = service('api');
    const worker = service('worker');
    expect(worker.image).toBe(api.image);
    expect([worker.command].flat()).toEqual(['worker']);
    expect(worker.ports).toBeUndefined();
    expect(worker.environment).toMatchObject({
      REDIS_URL: 'redis://redis:6379',
      HOOKLINE_SECRET_KEY: api.environment?.HOOKLINE_SECRET_KEY,
      // The worker's /metrics listens on HOOKLINE_API_HOST: on loopback Prometheus could not scrape it.
      HOOKLINE_API_HOST: '0.0.0.0',
      HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
    });
    expect(read('docker-compose.yml')).toMatch(/production must not set it/);
    expect(healthTest(worker)).toContain(`127.0.0.1:${DEFAULTS.metricsPort}/healthz`);
    expect(api.environment?.HOOKLINE_ALLOW_PRIVATE_TARGETS).toBeUndefined();
  });

  it('builds from a Dockerfile that exists and mounts only files and folders that exist', () => {
    for (const [name, s] of Object.entries(compose.services)) {
      if (s.build !== undefined) {
        const build = typeof s.build === 'string' ? { context: s.build } : s.build;
        expect(
          existsSync(path.join(ROOT, build.context, build.dockerfile ?? 'Dockerfile')),
          `${name}: Dockerfile`,
        ).toBe(true);
      }
      for (const [source] of bindMounts(s))
        expect(existsSync(path.join(ROOT, source)), `${name} mounts ${source}`).toBe(true);
    }
  });

  it('wires Prometheus, Grafana and the receiver to the files in this repository', () => {
    const prometheus = service('prometheus');
    expect(bindMounts(prometheus)).toContainEqual(['./dashboards/prometheus', '/etc/prometheus']);

    const grafana = service('grafana');
    const mounts = new Map(bindMounts(grafana).map(([source, target]) => [path.normalize(source), target]));
    expect(mounts.get('dashboards/grafana/provisioning/datasources')).toBe('/etc/grafana/provisioning/datasources');
    expect(mounts.get('dashboards/grafana/provisioning/dashboards')).toBe('/etc/grafana/provisioning/dashboards');
    const dashboardTarget = mounts.get('dashboards/grafana/hookline-overview.json');
    expect(dashboardTarget).toBeDefined();
    // The file provider reads the folder the dashboard is mounted into; the home dashboard is that file.
    const provider = readYaml<{ providers: { type: string; options: { path: string } }[] }>(
      'dashboards/grafana/provisioning/dashboards/hookline.yml',
    );
    expect(provider.providers.map((p) => [p.type, p.options.path])).toEqual([
      ['file', path.posix.dirname(dashboardTarget ?? '')],
    ]);
    expect(grafana.environment).toMatchObject({
      GF_AUTH_ANONYMOUS_ENABLED: 'true',
      GF_AUTH_ANONYMOUS_ORG_ROLE: 'Viewer',
      GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH: dashboardTarget,
    });

    const receiver = service('receiver');
    expect(supportedNodeImage(receiver.image ?? ''), receiver.image).toBe(true);
    expect(bindMounts(receiver)).toContainEqual(['./examples/demo-receiver', '/app']);
    expect([receiver.command].flat().join(' ')).toContain('/app/receiver.mjs');
  });

  it('passes `docker compose config -q`', (ctx) => {
    const compose = dockerCompose();
    if (!compose.ok) {
      const why = `${compose.why}; skipping \`docker compose config -q\``;
      console.warn(why);
      return ctx.skip(why);
    }
    // Without HOOKLINE_SECRET_KEY too: compose itself requires nothing.
    const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => k !== 'HOOKLINE_SECRET_KEY'));
    const result = run('docker', ['compose', '-f', 'docker-compose.yml', 'config', '-q'], { env });
    expect(result.output).toBe('');
    expect(result.status).toBe(0);
  });
});

describe('Dockerfile', () => {
  /** Instructions with continuation lines joined and comments dropped, split into stages. */
  const stages = (() => {
    const lines = read('Dockerfile')
      .replace(/\\\r?\n/g, ' ')
      .split(/\r?\n/)
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    const result: { from: string; instructions: [string, string][] }[] = [];
    for (const line of lines) {
      const [, keyword = '', rest = ''] = /^(\S+)\s*(.*)$/.exec(line) ?? [];
      if (keyword.toUpperCase() === 'FROM') result.push({ from: rest, instructions: [] });
      else result.at(-1)?.instructions.push([keyword.toUpperCase(), rest]);
    }
    return result;
  })();
  const build = stages[0];
  const runtime = stages.at(-1);
  const all = (stage: typeof runtime, keyword: string) =>
    (stage?.instructions ?? []).filter(([k]) => k === keyword).map(([, rest]) => rest);

  it('builds on a Node the package supports: npm ci, build, prune dev dependencies', () => {
    expect(stages).toHaveLength(2);
    expect(supportedNodeImage(build?.from.replace(/\s+AS\s+build$/i, '') ?? ''), build?.from).toBe(true);
    const runs = all(build, 'RUN').join(' && ');
    expect(runs).toMatch(/npm ci\b/);
    expect(runs).toContain('npm run build');
    expect(runs).toContain('npm prune --omit=dev');
  });

  it('copies only dist/, node_modules/ and package.json (the engine’s and each workspace’s) from the build stage into the runtime stage', () => {
    // The runtime stage runs what the build stage built, on the same Node.
    expect(`${runtime?.from} AS build`).toBe(build?.from);
    const copies = [...all(runtime, 'COPY'), ...all(runtime, 'ADD')];
    expect(copies.length).toBeGreaterThan(0);
    const sources = copies.flatMap((copy) => {
      const words = copy.split(/\s+/);
      expect(words, copy).toContain('--from=build');
      return words.filter((word) => !word.startsWith('--')).slice(0, -1);
    });
    // node_modules/ links each workspace (a client package the engine imports) to its folder.
    const { workspaces } = JSON.parse(read('package.json')) as { workspaces: string[] };
    const workdir = all(runtime, 'WORKDIR').at(-1) ?? '/';
    const expected = ['.', ...workspaces].flatMap((dir) =>
      dir === '.' ? ['bin', 'dist', 'node_modules', 'package.json'] : [`${dir}/dist`, `${dir}/package.json`],
    );
    expect(sources.sort()).toEqual(expected.map((source) => path.posix.join(workdir, source)).sort());
  });

  it('runs as a non-root user with NODE_ENV=production, both ports, a health check and the hookline CLI', () => {
    const users = all(runtime, 'USER');
    expect(users.length).toBeGreaterThan(0);
    expect(users.at(-1)).not.toMatch(/^(root|0)(:|$)/);
    expect(all(runtime, 'ENV').join(' ')).toMatch(/\bNODE_ENV=production\b/);
    // The ports the API and a worker's health server listen on by default.
    expect(all(runtime, 'EXPOSE').join(' ').split(/\s+/).sort()).toEqual(
      [String(DEFAULTS.apiPort), String(DEFAULTS.metricsPort)].sort(),
    );
    const [healthcheck] = all(runtime, 'HEALTHCHECK');
    expect(healthcheck).toMatch(/CMD \["node", "-e", ".*fetch\(.*\/healthz/);
    // The package's own CLI, started as `hookline start` unless the container is given another command.
    const pkg = JSON.parse(read('package.json')) as { bin: { hookline: string } };
    expect(all(runtime, 'ENTRYPOINT')).toEqual([`["node", "${pkg.bin.hookline}"]`]);
    expect(all(runtime, 'CMD')).toEqual(['["start"]']);
  });

  it('installs a `hookline` command that is executable in git and runs the CLI whatever mode a rebuild leaves dist/cli.js in', async () => {
    const pkg = JSON.parse(read('package.json')) as { bin: { hookline: string }; files: string[] };
    const launcher = pkg.bin.hookline;
    // A compiler writes dist/cli.js without the execute bit, so the command must not be that file.
    expect(launcher.startsWith('dist/')).toBe(false);
    expect(pkg.files).toContain(launcher.split('/')[0]);
    const staged = spawnSync('git', ['ls-files', '--stage', '--', launcher], { cwd: ROOT, encoding: 'utf8' });
    expect(staged.stdout.split(/\s+/)[0]).toBe('100755');
    expect(readFileSync(path.join(ROOT, launcher), 'utf8').startsWith('#!/usr/bin/env node\n')).toBe(true);
    const cli = path.join(ROOT, 'dist', 'cli.js');
    // The built CLI, while no other test builds the checkout: on a clean clone, where no test has
    // built it yet (`npm start` in the CLI and quick-start tests), it is built here as they build it.
    await withBuildLock(async () => {
      if (!existsSync(cli)) await buildAsNpmStart();
      const mode = statSync(cli).mode & 0o777;
      try {
        chmodSync(cli, 0o644);
        const run = spawnSync(path.join(ROOT, launcher), ['--version'], { cwd: ROOT, encoding: 'utf8' });
        expect(run.stderr).toBe('');
        expect(run.stdout.trim()).toBe((JSON.parse(read('package.json')) as { version: string }).version);
      } finally {
        chmodSync(cli, mode);
      }
    });
    // The lock may be held by another test's build for minutes; the build itself takes one or two.
  }, 420_000);

  it('has a .dockerignore that lets in exactly what the build stage copies', () => {
    const ignore = read('.dockerignore')
      .split('\n')
      .map((line) => line.trim())
      .filter((line) => line !== '' && !line.startsWith('#'));
    expect(ignore[0]).toBe('*');
    const allowed = ignore.filter((line) => line.startsWith('!')).map((line) => line.slice(1).replace(/\/$/, ''));
    const copied = all(build, 'COPY').flatMap((copy) =>
      copy
        .split(/\s+/)
        .filter((word) => !word.startsWith('--'))
        .slice(0, -1),
    );
    expect(copied.sort()).toEqual(allowed.sort());
    for (const file of allowed) expect(existsSync(path.join(ROOT, file)), file).toBe(true);
  });
});

describe('Grafana dashboard and provisioning', () => {
  const dashboard = JSON.parse(read('dashboards/grafana/hookline-overview.json')) as Dashboard;
  const panels = dashboard.panels.flatMap((p) => [p, ...(p.panels ?? [])]);
  const contentPanels = panels.filter((p) => p.type !== 'row');

  it('is the provisioned hookline-overview dashboard on the prometheus data source', () => {
    expect(dashboard.uid).toBe('hookline-overview');
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(38);
    const variable = dashboard.templating.list.find((v) => v.name === 'datasource');
    expect(variable).toMatchObject({ type: 'datasource', query: 'prometheus' });
    const datasources = readYaml<{ datasources: { uid: string; type: string; url: string }[] }>(
      'dashboards/grafana/provisioning/datasources/prometheus.yml',
    );
    expect(datasources.datasources).toEqual([
      expect.objectContaining({ uid: 'prometheus', type: 'prometheus', url: 'http://prometheus:9090' }),
    ]);
    expect(dashboardFiles().map((file) => path.relative(ROOT, file))).toEqual([
      path.join('dashboards', 'grafana', 'hookline-overview.json'),
    ]);
  });

  it('gives every panel a title and at least one query, on the templated data source, inside the grid', () => {
    expect(contentPanels.length).toBeGreaterThanOrEqual(15);
    expect(panels.filter((p) => p.type === 'row').length).toBeGreaterThanOrEqual(4);
    expect(new Set(panels.map((p) => p.id)).size).toBe(panels.length);
    for (const panel of contentPanels) {
      expect(panel.title, `panel ${panel.id}`).toMatch(/\S/);
      expect(panel.targets?.length, panel.title).toBeGreaterThan(0);
      for (const target of panel.targets ?? []) {
        expect(target.expr, panel.title).toMatch(/\S/);
        expect(target.datasource?.uid ?? panel.datasource?.uid, panel.title).toBe('${datasource}');
      }
      expect(panel.gridPos.x + panel.gridPos.w, panel.title).toBeLessThanOrEqual(24);
    }
  });

  it('has the panels an operator looks for', () => {
    const titles = contentPanels.map((p) => p.title ?? '');
    for (const wanted of [
      /ingest rate by result/i,
      /delivery success ratio/i,
      /attempt latency/i,
      /end-to-end lag/i,
      /queue depth/i,
      /retries/i,
      /dead letters/i,
      /webhooks disabled/i,
      /ssrf/i,
      /circuits open/i,
      /circuit transitions/i,
      /requests by status class/i,
      /latency p99 by route/i,
      /cpu/i,
      /resident memory/i,
      /event-loop lag/i,
    ]) {
      expect(
        titles.some((title) => wanted.test(title)),
        String(wanted),
      ).toBe(true);
    }
    // Quantiles come from histogram buckets; the queue gauge is the same in every process: max(), not sum().
    const exprs = dashboardExpressions(dashboard);
    expect(exprs.filter((e) => e.includes('histogram_quantile')).every((e) => /_bucket\{/.test(e))).toBe(true);
    expect(
      exprs
        .filter((e) => e.includes('hookline_queue_jobs'))
        .every((e) => /max by \(state\) \(hookline_queue_jobs/.test(e)),
    ).toBe(true);
  });

  it('queries only metrics the engine registers, and shows every hookline_* metric', () => {
    const registered = new Set(
      createMetrics({ role: 'test' })
        .registry.getMetricsAsArray()
        .map((m) => m.name),
    );
    const used = metricNamesUsedInDashboards();
    expect(used.filter((name) => !registered.has(name))).toEqual([]);
    expect([...registered].filter((name) => name.startsWith('hookline_') && !used.includes(name))).toEqual([]);
  });

  it('extracts metric names from PromQL (the helper for the live-engine test)', () => {
    expect(
      metricNamesInExpression(
        'histogram_quantile(0.99, sum by (le, route) (rate(hookline_http_request_duration_seconds_bucket{job=~"$job", route!="/metrics"}[$__rate_interval])))',
      ),
    ).toEqual(['hookline_http_request_duration_seconds']);
    expect(
      metricNamesInExpression(
        'sum(rate(a_total{x="y"}[5m] offset 1h)) / on (job) group_left(version) b_info * 1e3 > bool 5',
      ),
    ).toEqual(['a_total', 'b_info']);
    expect(metricNamesInExpression('deriv(sum(max by (state) (q{state=~"a|b"}))[15m:1m]) > 0 and up == 1')).toEqual([
      'q',
    ]);
    expect(
      metricNamesInExpression(
        'label_replace(rate(h_total[1m]), "class", "${1}xx", "status", "([0-9]).."), nan, Inf, 0x1F',
      ),
    ).toEqual(['h_total']);
    expect(metricNamesInExpression('sum(x_seconds_sum) / sum(x_seconds_count) or absent(up{job="w"})')).toEqual([
      'x_seconds',
    ]);
    expect(ruleExpressions('groups: [{name: g, rules: [{alert: A, expr: "m > 1"}]}]')).toEqual(['m > 1']);
  });
});

describe('Prometheus scrape config and alert rules', () => {
  const config = readYaml<PrometheusConfig>('dashboards/prometheus/prometheus.yml');
  const rules = readYaml<{ groups: { rules: AlertRule[] }[] }>('dashboards/prometheus/alerts.yml').groups.flatMap(
    (g) => g.rules,
  );

  it('scrapes the API and the DNS-discovered workers every 15s and loads the alert rules', () => {
    expect(config.global.scrape_interval).toBe('15s');
    expect(config.rule_files).toEqual(['alerts.yml']);
    const jobs = new Map(config.scrape_configs.map((job) => [job.job_name, job]));
    expect([...jobs.keys()].sort()).toEqual(['hookline-api', 'hookline-worker']);
    expect(jobs.get('hookline-api')?.static_configs).toEqual([{ targets: [`api:${DEFAULTS.metricsPort}`] }]);
    expect(jobs.get('hookline-worker')?.dns_sd_configs).toEqual([
      expect.objectContaining({ names: ['worker'], type: 'A', port: 9464 }),
    ]);
  });

  it('gives every alert a hold time, a severity, a summary and a runbook-style description', () => {
    const alerts = rules.filter((r) => r.alert !== undefined);
    expect(alerts.map((r) => r.alert)).toEqual(
      expect.arrayContaining([
        'HooklineDeliveryFailureRatioHigh',
        'HooklineBacklogGrowing',
        'HooklineDeadLettersGrowing',
        'HooklineWorkerDown',
        'HooklineRedisUnreachable',
      ]),
    );
    for (const rule of alerts) {
      expect(rule.for, rule.alert).toMatch(/^\d+[smh]$/);
      expect(['warning', 'critical'], rule.alert).toContain(rule.labels?.severity);
      expect(rule.annotations?.summary, rule.alert).toMatch(/\S/);
      expect(rule.annotations?.description, rule.alert).toMatch(/What to do:/);
    }
  });

  it('has a unit test that fires each alert and one where it stays silent', () => {
    const tests = readYaml<{
      rule_files: string[];
      tests: { alert_rule_test: { alertname: string; exp_alerts?: unknown[] }[] }[];
    }>('dashboards/prometheus/alerts.test.yml');
    expect(tests.rule_files).toEqual(['alerts.yml']);
    const checks = tests.tests.flatMap((t) => t.alert_rule_test);
    for (const rule of rules.filter((r) => r.alert !== undefined)) {
      const mine = checks.filter((c) => c.alertname === rule.alert);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length > 0),
        `${rule.alert} fires`,
      ).toBe(true);
      expect(
        mine.some((c) => (c.exp_alerts ?? []).length === 0),
        `${rule.alert} stays silent`,
      ).toBe(true);
    }
  });

  it('passes promtool check config', (ctx) => {
    const result = run(promtool(ctx), ['check', 'config', 'dashboards/prometheus/prometheus.yml']);
    expect(result.output).toContain('SUCCESS');
    expect(result.status, result.output).toBe(0);
  });

  it('passes promtool check rules', (ctx) => {
    const result = run(promtool(ctx), ['check', 'rules', 'dashboards/prometheus/alerts.yml']);
    expect(result.status, result.output).toBe(0);
  });

  it('passes promtool test rules', (ctx) => {
    const result = run(promtool(ctx), ['test', 'rules', 'dashboards/prometheus/alerts.test.yml']);
    expect(result.output).toContain('SUCCESS');
    expect(result.status, result.output).toBe(0);
  });

  it('has dashboard queries that are valid PromQL (checked by promtool as recording rules)', (ctx) => {
    const tool = promtool(ctx);
    const dashboard = JSON.parse(read('dashboards/grafana/hookline-overview.json')) as Dashboard;
    const exprs = dashboardExpressions(dashboard).filter((e) => !e.startsWith('label_values('));
    expect(exprs.length).toBeGreaterThan(20);
    const promql = exprs.map((e) =>
      e.replace(/\$__(rate_interval|interval|range)\b/g, '1m').replace(/\$\{?job\}?/g, 'hookline-api|hookline-worker'),
    );
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-dashboard-promql-'));
    try {
      const file = path.join(dir, 'dashboard-queries.yml');
      const recordingRules = promql.map((expr, i) => ({ record: `dashboard:query_${i}`, expr }));
      writeFileSync(file, JSON.stringify({ groups: [{ name: 'dashboard', rules: recordingRules }] }));
      const result = run(tool, ['check', 'rules', file]);
      expect(result.output).toContain(`SUCCESS: ${promql.length} rules found`);
      expect(result.status, result.output).toBe(0);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('demo receiver', () => {
  const SECRET = 'demo-secret';
  let child: ChildProcess;
  let base: string;
  let output = '';

  beforeAll(async () => {
    const script = path.join(ROOT, 'examples/demo-receiver/receiver.mjs');
    expect(statSync(script).isFile()).toBe(true);
    child = spawn(process.execPath, [script], {
      env: { ...process.env, PORT: '0', WEBHOOK_SECRET: SECRET, FAIL_RATE: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    base = await new Promise<string>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error(`receiver did not start: ${output}`)), 10_000);
      const onData = (chunk: Buffer) => {
        output += chunk.toString();
        const port = /listening on :(\d+)/.exec(output)?.[1];
        if (port) {
          clearTimeout(timer);
          resolve(`http://127.0.0.1:${port}`);
        }
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', (chunk: Buffer) => (output += chunk.toString()));
    });
  });

  afterAll(async () => {
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      await exited;
    }
  });

  /** Posts an event signed by the engine's own signer, optionally tampered with after signing. */
  async function deliver(
    options: {
      secrets?: string[];
      ageSec?: number;
      tamper?: (headers: Record<string, string>, body: string) => [Record<string, string>, string];
    } = {},
  ) {
    const eventId = randomUUID();
    const body = JSON.stringify({
      version: '1.0',
      event_id: eventId,
      event_type: 'EVENT_TYPE_MACHINE_CREATED',
      timestamp: new Date().toISOString(),
      data: { test: true },
    });
    const signed = signatureHeaders({
      webhookId: eventId,
      timestampSec: Math.floor(Date.now() / 1000) - (options.ageSec ?? 0),
      body,
      secrets: options.secrets ?? [SECRET],
    });
    const baseHeaders = {
      ...signed,
      'content-type': 'application/json',
      'x-webhook-event': 'EVENT_TYPE_MACHINE_CREATED',
      'x-webhook-attempt': '3',
    };
    const [headers, sent] = options.tamper ? options.tamper(baseHeaders, body) : [baseHeaders, body];
    const response = await fetch(`${base}/hooks`, { method: 'POST', headers, body: sent });
    const line = await waitFor(
      () => output.split('\n').find((l) => l.includes(`event=${eventId}`)),
      2_000,
      'the demo receiver’s line',
    ).catch(() => undefined);
    return { status: response.status, line };
  }

  it('answers 204 to a correctly signed request and logs id, type, attempt and verified=yes', async () => {
    const { status, line } = await deliver();
    expect(status).toBe(204);
    expect(line).toMatch(
      /event=\S+ type=EVENT_TYPE_MACHINE_CREATED attempt=3 verified=yes \(standard=yes legacy=yes\) status=204/,
    );
  });

  it('accepts a secret rotation whichever of the two secrets the receiver holds', async () => {
    // The receiver still on the previous secret: webhook-signature carries it second, and the legacy
    // header carries only it until the overlap ends.
    const onOld = await deliver({ secrets: ['new-secret', SECRET] });
    expect(onOld.status).toBe(204);
    expect(onOld.line).toMatch(/verified=yes \(standard=yes legacy=yes\)/);
    // The receiver already on the new secret: the standard header decides.
    const onNew = await deliver({ secrets: [SECRET, 'old-secret'] });
    expect(onNew.status).toBe(204);
    expect(onNew.line).toMatch(/verified=yes \(standard=yes legacy=no\)/);
  });

  it('answers 401 and logs verified=no for a changed body, a wrong secret or a stale timestamp', async () => {
    const changedBody = await deliver({ tamper: (h, body) => [h, body.replace('true', 'false')] });
    expect(changedBody.status).toBe(401);
    expect(changedBody.line).toMatch(/verified=no \(standard=no legacy=no\)/);
    expect((await deliver({ secrets: ['another-secret'] })).status).toBe(401);
    expect((await deliver({ ageSec: 6 * 60 })).status).toBe(401);
    expect((await deliver({ ageSec: -6 * 60 })).status).toBe(401);
    expect((await deliver({ ageSec: 4 * 60 })).status).toBe(204);
    const unsigned = await deliver({
      tamper: (h, body) => [Object.fromEntries(Object.entries(h).filter(([k]) => !k.endsWith('signature'))), body],
    });
    expect(unsigned.status).toBe(401);
  });

  it('judges a request with only the legacy header by that header', async () => {
    const withoutStandard = (h: Record<string, string>) =>
      Object.fromEntries(Object.entries(h).filter(([k]) => k !== 'webhook-signature'));
    expect((await deliver({ tamper: (h, body) => [withoutStandard(h), body] })).status).toBe(204);
    const wrong = await deliver({
      tamper: (h, body) => [{ ...withoutStandard(h), 'x-webhook-signature': `sha256=${'0'.repeat(64)}` }, body],
    });
    expect(wrong.status).toBe(401);
    expect(wrong.line).toMatch(/verified=no \(standard=absent legacy=no\)/);
  });

  it('verifies a whsec_ secret with the base64-decoded key', async () => {
    const whsec = `whsec_${Buffer.from('0123456789abcdef0123456789abcdef').toString('base64')}`;
    const other = spawn(process.execPath, [path.join(ROOT, 'examples/demo-receiver/receiver.mjs')], {
      env: { ...process.env, PORT: '0', WEBHOOK_SECRET: whsec },
      stdio: ['ignore', 'pipe', 'ignore'],
    });
    try {
      const otherBase = await new Promise<string>((resolve) => {
        let text = '';
        other.stdout?.on('data', (chunk: Buffer) => {
          text += chunk.toString();
          const port = /listening on :(\d+)/.exec(text)?.[1];
          if (port) resolve(`http://127.0.0.1:${port}`);
        });
      });
      const eventId = randomUUID();
      const body = '{"event_id":"x"}';
      const post = (headers: Record<string, string>) =>
        fetch(`${otherBase}/hooks`, { method: 'POST', headers, body }).then((r) => r.status);
      const signed = (secret: string) =>
        signatureHeaders({ webhookId: eventId, timestampSec: Math.floor(Date.now() / 1000), body, secrets: [secret] });
      // Keyed with the decoded bytes: a receiver keying with the whole string would answer 401.
      expect(await post(signed(whsec))).toBe(204);
      expect(await post(signed(`whsec_${Buffer.from('another key, 32 bytes long......').toString('base64')}`))).toBe(
        401,
      );
      // The legacy header is keyed with the whole secret as UTF-8, whsec_ prefix included.
      const { 'webhook-signature': _standard, ...legacyOnly } = signed(whsec);
      expect(await post(legacyOnly)).toBe(204);
    } finally {
      const exited = new Promise((resolve) => other.once('exit', resolve));
      other.kill('SIGTERM');
      await exited;
    }
  });
});
