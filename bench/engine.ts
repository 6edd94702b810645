import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { Worker } from 'node:worker_threads';
import { Pool } from 'undici';
import { loadConfig, type Config } from '../src/config/env.js';
import { createEngine, type Engine, type EngineConfig, type Stores } from '../src/engine/index.js';
import type { FinishedOutcome } from '../src/delivery/attempt.js';
import type { WebhookEventType } from '../src/domain/events.js';
import { createLogger, type Logger } from '../src/logger.js';
import { createMetrics, type Metrics } from '../src/metrics/metrics.js';
import { connectRedis, type Redis } from '../src/store/redis.js';
import { freeLoopbackPort } from '../src/embedded/redis-server.js';
import { procStatCpuUs, wallMs } from './measure.js';
import { deleteKeys } from './redis-info.js';
import { BENCH_EVENT_TYPE, vendorId } from './workload.js';

/** Hookline's configuration as `hookline start` would read it: defaults plus any HOOKLINE_* variable set (trace export stays off: the traces scenario turns it on). */
export function engineConfig(env: NodeJS.ProcessEnv): Config {
  return loadConfig(Object.fromEntries(Object.entries(env).filter(([name]) => name.startsWith('HOOKLINE_'))));
}

let sharedMetrics: Metrics | undefined;
/** One metrics registry for every engine of the bench process (Node's default metrics are process-wide). */
function metricsOnce(): Metrics {
  sharedMetrics ??= createMetrics({ role: 'all' });
  return sharedMetrics;
}

/** The production logger (same redaction, asynchronous writes as the CLI's) writing to the null device, so its cost is paid but not its output. */
function benchLogger(level: string): Logger {
  // SonicBoom, what pino.destination(fd) gives the CLI, lacks only the `writable` flag of the type.
  const destination = pino.destination({ dest: os.devNull, sync: false }) as unknown as NodeJS.WritableStream;
  return createLogger({ level, format: 'json', fd: 1, destination });
}

export interface BenchEngineOptions {
  redisUrl: string;
  config: Config;
  /** HOOKLINE_LOG_LEVEL for the engine's logger (default info, as in production). */
  logLevel?: string;
  /** Parallel connections of the producer client to the admin API. */
  apiConnections: number;
  /** Run the delivery worker in this process too, as `hookline start` does; without it only the API runs. */
  worker?: WorkerOptions;
}

interface WorkerOptions {
  concurrency: number;
  deliveryTimeoutMs?: number;
  onOutcome?: (outcome: FinishedOutcome) => void;
}

/** A `hookline worker` process started by the bench. */
export interface WorkerProcess {
  pid: number;
  /** How it was started: the built CLI (`dist/cli.js`) or the TypeScript source through tsx. */
  entry: string;
  /** Its resident set size now, from /proc (Linux). */
  rssBytes(): number;
  /** CPU time it has used so far (user + system), in microseconds, from /proc (Linux). */
  cpuUs(): number;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');

export interface PostResult {
  accepted: number;
  /** Wall-clock ms when the request was sent and when its 202 arrived. */
  sentAtMs: number;
  answeredAtMs: number;
}

/**
 * Hookline as `hookline start` runs it (the production assembly, `createEngine`: role `all` with the
 * worker in this process, else `api`; the admin API listening on loopback; metrics and info logs on),
 * under a fresh key prefix, with an events:write key and an HTTP client for producers. `close()`
 * stops everything and deletes the prefix's keys.
 */
export class BenchEngine {
  private workerChild: ChildProcess | undefined;
  private workerThread: Worker | undefined;

  private constructor(
    readonly prefix: string,
    private readonly engine: Engine,
    /** The engine's configuration, for a worker started beside it. */
    private readonly engineConfig: EngineConfig,
    private readonly client: Pool,
    private readonly apiKey: string,
    private readonly options: BenchEngineOptions,
    private readonly secretKey: Buffer,
  ) {}

  get stores(): Stores {
    return this.engine.stores;
  }

  /** The engine's application connection. */
  get redis(): Redis {
    return this.engine.stores.redis;
  }

  static async start(options: BenchEngineOptions): Promise<BenchEngine> {
    const prefix = `bench${randomBytes(4).toString('hex')}`;
    const secretKey = randomBytes(32);
    const config = {
      ...options.config,
      redisUrl: options.redisUrl,
      secretKey,
      redisPrefix: prefix,
      apiHost: '127.0.0.1',
      apiPort: 0,
      // The bench's producers are the platform's own services: no per-key limits in the way.
      rateLimitPerSecond: 0,
      ingestRateLimitPerSecond: 0,
      allowPrivateTargets: true,
      ...(options.worker
        ? {
            workerConcurrency: options.worker.concurrency,
            deliveryTimeoutMs: options.worker.deliveryTimeoutMs ?? options.config.deliveryTimeoutMs,
          }
        : {}),
    };
    const engine = await createEngine(config, {
      role: options.worker ? 'all' : 'api',
      logger: benchLogger(options.logLevel ?? options.config.logLevel),
      listen: true,
      metrics: metricsOnce(),
      ...(options.worker?.onOutcome ? { worker: { onOutcome: options.worker.onOutcome } } : {}),
    });
    const { api: origin } = await engine.start();
    const { key } = await engine.stores.apiKeys.create({ name: 'bench producer', roles: ['events:write'] });
    const client = new Pool(origin!, { connections: options.apiConnections, pipelining: 1 });
    return new BenchEngine(prefix, engine, config, client, key, options, secretKey);
  }

  /**
   * The engine's read-model delay histogram so far (accepted → visible, per projection entry): each
   * bucket's upper bound in seconds (Infinity last) → how many entries took at most that long.
   */
  async readModelDelays(): Promise<Map<number, number>> {
    const { values } = await this.engine.metrics!.readModelDelay.get();
    return new Map(
      values
        .filter((value) => value.metricName?.endsWith('_bucket'))
        .map((value) => [Number(value.labels.le), value.value]),
    );
  }

  /** Registers vendor i's webhook for each of `eventTypes` at `urls[i]` with `secrets[i]`; answers the ids. */
  async registerWebhooks(
    urls: readonly string[],
    secrets: readonly string[],
    eventTypes: readonly WebhookEventType[] = [BENCH_EVENT_TYPE],
  ): Promise<string[]> {
    const ids: string[] = [];
    for (const [i, callbackUrl] of urls.entries()) {
      for (const eventType of eventTypes) {
        const created = await this.stores.webhooks.create(vendorId(i), { eventType, callbackUrl, secret: secrets[i]! });
        if (!created.ok) throw new Error(`webhook ${i} for ${eventType} already exists`);
        ids.push(created.webhook.id);
      }
    }
    return ids;
  }

  /**
   * Starts a real `hookline worker` process on this engine's Redis and prefix (the built CLI when
   * `npm run build` has run, else the source through tsx), its logs discarded; resolves once it runs.
   */
  async startWorkerProcess(options: { concurrency: number; env?: NodeJS.ProcessEnv }): Promise<WorkerProcess> {
    if (this.engine.worker || this.workerChild) throw new Error('the worker is already running');
    const { config } = this.options;
    const built = path.join(ROOT, 'dist', 'cli.js');
    // BENCH_WORKER_NODE_ARGS: extra node flags for the worker, e.g. `--cpu-prof --cpu-prof-dir=<dir>`.
    const nodeArgs = (process.env.BENCH_WORKER_NODE_ARGS ?? '').split(' ').filter((arg) => arg !== '');
    const args = [
      ...nodeArgs,
      ...(existsSync(built) ? [built, 'worker'] : ['--import', 'tsx', path.join(ROOT, 'src', 'cli.ts'), 'worker']),
    ];
    // The bench's own HOOKLINE_* settings pass through, as they configure the in-process engine.
    const env = Object.fromEntries(Object.entries(process.env).filter(([name]) => name !== 'REDIS_URL'));
    const child = spawn(process.execPath, args, {
      cwd: ROOT,
      stdio: ['ignore', 'pipe', 'pipe'],
      env: {
        ...env,
        REDIS_URL: this.options.redisUrl,
        HOOKLINE_REDIS_PREFIX: this.prefix,
        HOOKLINE_SECRET_KEY: this.secretKey.toString('base64'),
        HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true',
        HOOKLINE_WORKER_CONCURRENCY: String(options.concurrency),
        HOOKLINE_QUEUE_PARTITIONS: String(config.queuePartitions),
        HOOKLINE_METRICS_PORT: String(await freeLoopbackPort()),
        HOOKLINE_LOG_LEVEL: config.logLevel,
        HOOKLINE_LOG_FORMAT: 'json',
        ...options.env,
      },
    });
    this.workerChild = child;
    let output = '';
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`the worker did not start within 30 s: ${output.slice(-500)}`)),
        30_000,
      );
      const onData = (chunk: Buffer) => {
        if (output.length < 100_000) output += chunk.toString('utf8');
        if (output.includes('delivery worker running')) {
          clearTimeout(timer);
          resolve();
        }
      };
      child.stdout?.on('data', onData);
      child.stderr?.on('data', onData);
      child.once('exit', (code) => {
        clearTimeout(timer);
        reject(new Error(`the worker exited with ${code}: ${output.slice(-500)}`));
      });
    });
    // From here on its output is read and dropped, so the pipe never fills.
    child.stdout?.removeAllListeners('data').resume();
    child.stderr?.removeAllListeners('data').resume();
    const pid = child.pid!;
    return {
      pid,
      entry: args.includes('tsx') ? 'src/cli.ts through tsx' : 'dist/cli.js',
      rssBytes() {
        const match = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
        return match ? Number(match[1]) * 1024 : 0;
      },
      cpuUs: () => procStatCpuUs(`/proc/${pid}/stat`),
    };
  }

  /**
   * Starts the delivery worker in a `worker_threads` thread of this process (bench/delivery-thread.ts),
   * on this engine's Redis and prefix, as `hookline worker` would run; resolves once it runs.
   */
  async startWorkerThread(options: { concurrency: number }): Promise<void> {
    if (this.engine.worker || this.workerChild || this.workerThread) throw new Error('the worker is already running');
    const config = { ...this.engineConfig, workerConcurrency: options.concurrency };
    const thread = new Worker(new URL('./delivery-thread.mjs', import.meta.url), { workerData: { config } });
    this.workerThread = thread;
    await new Promise<void>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('the delivery thread did not start within 30 s')), 30_000);
      thread.once('message', () => {
        clearTimeout(timer);
        resolve();
      });
      thread.once('error', (error) => {
        clearTimeout(timer);
        reject(error);
      });
    });
  }

  /** Circuits opened so far by every engine of this bench process (the shared metrics registry). */
  static async circuitsOpened(): Promise<number> {
    const { values } = await metricsOnce().circuitTransitions.get();
    return values.filter((v) => v.labels.state === 'open').reduce((sum, v) => sum + v.value, 0);
  }

  /** POSTs one ingest request body (`{events: [...]}`); throws unless every event was accepted. */
  async post(body: string, expected: number): Promise<PostResult> {
    const sentAtMs = wallMs();
    const response = await this.client.request({
      method: 'POST',
      path: '/internal/v1/events',
      headers: { 'content-type': 'application/json', 'x-api-key': this.apiKey },
      body,
    });
    const answeredAtMs = wallMs();
    const text = await response.body.text();
    if (response.statusCode !== 202) throw new Error(`ingest answered ${response.statusCode}: ${text.slice(0, 300)}`);
    const { accepted } = JSON.parse(text) as { accepted: number };
    if (accepted !== expected)
      throw new Error(`ingest accepted ${accepted} of ${expected} events: ${text.slice(0, 300)}`);
    return { accepted, sentAtMs, answeredAtMs };
  }

  /** Stops the worker (in-flight attempts get `graceMs`), the API and the connections; deletes the prefix's keys. */
  async close(graceMs = 2_000): Promise<void> {
    const thread = this.workerThread;
    if (thread) {
      // Stopped, or gone already (a thread that failed to start has exited).
      const stopped = new Promise((resolve) => {
        thread.once('message', resolve);
        thread.once('exit', resolve);
      });
      thread.postMessage('stop');
      const timer = setTimeout(() => void thread.terminate(), graceMs + 5_000);
      await stopped;
      clearTimeout(timer);
      await thread.terminate();
    }
    const child = this.workerChild;
    if (child && child.exitCode === null) {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), graceMs + 5_000);
      await exited;
      clearTimeout(timer);
    }
    await this.client.close();
    await this.engine.close(graceMs);
    const redis = connectRedis(this.options.redisUrl, {
      connectionName: `hookline-bench-${this.prefix}-cleanup`,
      maxRetriesPerRequest: 3,
    });
    await deleteKeys(redis, this.stores.keys.all);
    await redis.quit();
  }
}
