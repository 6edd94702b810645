#!/usr/bin/env node
import { Command, Option } from 'commander';
import { ConfigError, loadConfig, type Config } from './config/env.js';
import { EXTERNAL_ID_RE } from './domain/ids.js';
import { ROLES, type Role } from './domain/roles.js';
import { createLogger, type Logger } from './logger.js';
import { buildAdminServer } from './admin/server.js';
import { createServer } from 'node:http';
import { composeStores, composeWorker, type Stores } from './compose.js';
import { createMetrics, initialiseSeries, type Metrics } from './metrics/metrics.js';
import { scrapeCollector } from './metrics/observers.js';
import { StreamIngestSource } from './ingest/stream-source.js';
import { RedisApiKeyStore } from './store/api-keys.js';
import { resolveRedis, resolveSecretKey, type RedisEndpoint } from './store/embedded.js';
import { redisKeys } from './store/keys.js';
import { RedisServerUnavailableError } from './store/redis-server.js';
import { connectRedis, pingRedis, type Redis } from './store/redis.js';
import { VERSION } from './version.js';

/** Errors whose message is the whole story for a user: printed without a stack trace. */
class UsageError extends Error {}

const say = (line: string) => process.stderr.write(`${line}\n`);

/** Runs `body` with a Redis connection (embedded default when REDIS_URL is unset) and releases both. */
async function withRedis<T>(config: Config, name: string, body: (redis: Redis, endpoint: RedisEndpoint) => Promise<T>): Promise<T> {
  const endpoint = await resolveRedis(config, say);
  const redis = connectRedis(endpoint.url, { connectionName: name, maxRetriesPerRequest: 3 });
  try {
    return await body(redis, endpoint);
  } finally {
    await redis.quit().catch(() => undefined);
    await endpoint.release();
  }
}

/** Resolves on SIGINT or SIGTERM. */
function shutdownSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    process.once('SIGINT', () => resolve('SIGINT'));
    process.once('SIGTERM', () => resolve('SIGTERM'));
  });
}

/** How long past HOOKLINE_SHUTDOWN_GRACE a SIGTERM may take at most, whatever Redis is doing. */
const SHUTDOWN_SLACK_MS = 5_000;
/** A shutdown step that needs Redis (closing queues, QUIT) gets at most this long. */
const SHUTDOWN_STEP_MS = 1_000;

/** Runs shutdown steps so that none can hang the next, and all end before the shutdown deadline. */
class ShutdownSteps {
  constructor(private readonly endsAtMs: number) {}

  /** Waits for `work` at most SHUTDOWN_STEP_MS (less when the deadline is nearer); what it left undone stays undone. */
  async run(work: Promise<unknown> | undefined): Promise<void> {
    if (work === undefined) return;
    let timer: NodeJS.Timeout | undefined;
    const ms = Math.max(0, Math.min(SHUTDOWN_STEP_MS, this.endsAtMs - Date.now()));
    await Promise.race([work.catch(() => undefined), new Promise<void>((resolve) => (timer = setTimeout(resolve, ms)))]);
    clearTimeout(timer);
  }

  /**
   * Closes a connection politely (QUIT) when Redis answers, and drops it either way: a QUIT sent
   * during an outage waits in the offline queue while the connection keeps reconnecting, which
   * would keep the process alive.
   */
  async closeConnection(connection: Redis): Promise<void> {
    if (connection.status === 'ready') await this.run(connection.quit());
    connection.disconnect();
  }
}

type EngineRole = 'all' | 'api' | 'worker';

/** Logs a connection's outage once when it starts and once when it ends, not on every retry. */
function watchConnection(connection: Redis, name: string, logger: Logger): void {
  let down = false;
  connection.on('error', (error: Error) => {
    if (down) return;
    down = true;
    logger.warn({ connection: name, err: error.message }, 'Redis connection lost; retrying in the background');
  });
  connection.on('ready', () => {
    if (!down) return;
    down = false;
    logger.info({ connection: name }, 'Redis connection restored');
  });
}

/** Runs `start` until it succeeds (Redis may be down at start-up), every 2 s; never throws. */
function startWhenRedisAnswers(start: () => Promise<void>, logger: Logger, attempt = 1): void {
  start().catch((error: Error) => {
    if (attempt === 1) logger.warn({ err: error.message }, 'ingest stream consumer waiting for Redis');
    setTimeout(() => startWhenRedisAnswers(start, logger, attempt + 1), 2_000).unref();
  });
}

/** The standalone worker's own small server: /healthz, /readyz and /metrics. */
async function startWorkerHealthServer(
  config: Config,
  isReady: () => Promise<boolean>,
  metrics: Metrics,
  collect: () => Promise<void>,
  logger: Logger,
): Promise<{ close(): Promise<void> }> {
  const server = createServer((request, response) => {
    const send = (status: number, body: object) => response.writeHead(status, { 'content-type': 'application/json' }).end(JSON.stringify(body));
    if (request.url === '/healthz') return send(200, { status: 'ok' });
    if (request.url === '/metrics') {
      void collect()
        .then(() => metrics.registry.metrics())
        .then((text) => response.writeHead(200, { 'content-type': metrics.registry.contentType }).end(text))
        .catch(() => send(500, { error: 'metrics unavailable', code: 'internal' }));
      return;
    }
    if (request.url === '/readyz') {
      void isReady().then((ready) => (ready ? send(200, { status: 'ready' }) : send(503, { status: 'unavailable', error: 'Redis is unreachable' })));
      return;
    }
    send(404, { error: 'Route not found', code: 'route_not_found' });
  });
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(config.metricsPort, config.apiHost, resolve));
  logger.info(`worker health and metrics on http://${config.apiHost}:${config.metricsPort} (/healthz, /readyz, /metrics)`);
  return { close: () => new Promise((resolve) => server.close(() => resolve())) };
}

/** Runs the admin API, the delivery worker, or both, until SIGINT/SIGTERM; then shuts down in order. */
async function runEngine(config: Config, logger: Logger, role: EngineRole): Promise<void> {
  const secretKey = resolveSecretKey(config);
  const endpoint = await resolveRedis(config, (line) => logger.info(line));
  const redis = connectRedis(endpoint.url, { connectionName: `hookline-${role}`, maxRetriesPerRequest: 2 });
  const queueConnection = connectRedis(endpoint.url, { connectionName: `hookline-${role}-queues`, maxRetriesPerRequest: null, autoPipelining: false });
  for (const [name, connection] of [['app', redis], ['queues', queueConnection]] as const) watchConnection(connection, name, logger);
  const isReady = () => pingRedis(redis, 1_000);
  const metrics = createMetrics({ role });
  metrics.buildInfo.set({ version: VERSION }, 1);
  initialiseSeries(metrics);
  const stores = composeStores({
    observability: { metrics, logger },
    redis,
    queueConnection,
    redisPrefix: config.redisPrefix,
    secretKey,
    retryScheduleMs: config.retryScheduleMs,
    queuePartitions: config.queuePartitions,
    secretRotationOverlapMs: config.secretRotationOverlapMs,
    dedupeWindowMs: config.dedupeWindowMs,
  });
  const stops: ((steps: ShutdownSteps) => Promise<unknown>)[] = [];
  let circuitsOpen: (() => number) | undefined;
  const collect = scrapeCollector(metrics, { queueCounts: () => stores.queues.counts(), ping: isReady, circuitsOpen: () => circuitsOpen?.() ?? 0 });

  if (role !== 'worker') {
    // Load the listing's in-memory index now rather than on the first request (in the background:
    // with Redis down at start, the API still starts, answers /readyz 503, and recovers by itself).
    void stores.machines.refresh().catch((error: Error) => logger.warn({ err: error.message }, 'machine index not loaded yet; the first listing will load it'));
    const app = await buildAdminServer(stores.adminDeps({ logger, bodyLimitBytes: config.apiBodyLimitBytes, isReady, metrics: { ...metrics, collect }, rateLimitPerSecond: config.rateLimitPerSecond, ingestRateLimitPerSecond: config.ingestRateLimitPerSecond, allowPrivateTargets: config.allowPrivateTargets }));
    const address = await app.listen({ host: config.apiHost, port: config.apiPort });
    stops.push((steps) => steps.run(app.close()));
    logger.info(
      { redis: endpoint.origin === 'configured' ? 'REDIS_URL' : `embedded ${endpoint.url} (data in ${config.dataDir}/redis)`, version: VERSION },
      `Hookline API listening on ${address} (OpenAPI at ${address}/openapi.json, docs at ${address}/docs)`,
    );
  }
  if (role !== 'api') {
    const workerConnection = connectRedis(endpoint.url, { connectionName: 'hookline-worker-jobs', maxRetriesPerRequest: null, autoPipelining: false });
    watchConnection(workerConnection, 'worker', logger);
    const worker = composeWorker(stores, {
      workerConnection,
      logger,
      concurrency: config.workerConcurrency,
      retryScheduleMs: config.retryScheduleMs,
      deliveryTimeoutMs: config.deliveryTimeoutMs,
      allowPrivateTargets: config.allowPrivateTargets,
      sustainedFailureWindowMs: config.sustainedFailureWindowMs,
      lockDurationMs: config.workerLockDurationMs,
      metrics,
    });
    circuitsOpen = () => worker.breakers.openEndpoints(Date.now()).length;
    const stream = config.ingestStream ? new StreamIngestSource({ redis, keys: stores.keys, ingestor: stores.ingestor, logger }) : undefined;
    const health = role === 'worker' ? await startWorkerHealthServer(config, isReady, metrics, collect, logger) : undefined;
    worker.pool.start();
    if (stream) startWhenRedisAnswers(() => stream.start(), logger);
    stops.push(async (steps) => {
      await steps.run(stream?.stop());
      const ended = await worker.close(config.shutdownGraceMs);
      logger.info({ ended }, ended === 'drained' ? 'in-flight deliveries finished' : 'grace period over; unfinished deliveries return to the queue');
      await steps.closeConnection(workerConnection);
      await steps.run(health?.close());
    });
    logger.info({ concurrency: config.workerConcurrency, partitions: config.queuePartitions, stream: config.ingestStream }, 'delivery worker running');
  }

  const signal = await shutdownSignal();
  logger.info({ signal, graceMs: config.shutdownGraceMs }, 'shutting down');
  const steps = new ShutdownSteps(Date.now() + config.shutdownGraceMs + SHUTDOWN_SLACK_MS - SHUTDOWN_STEP_MS);
  // Every step below is bounded, but a process must end however it is stuck: this is the backstop.
  const deadline = setTimeout(() => {
    logger.error({ graceMs: config.shutdownGraceMs }, 'shutdown did not finish in time; exiting now (unfinished deliveries return to the queue when their locks expire)');
    logger.flush();
    process.exit(1);
  }, config.shutdownGraceMs + SHUTDOWN_SLACK_MS);
  deadline.unref();
  // A second signal means "now".
  const now = () => process.exit(1);
  process.once('SIGINT', now);
  process.once('SIGTERM', now);
  for (const stop of stops) await stop(steps);
  await steps.run(stores.queues.close());
  await Promise.all([redis, queueConnection].map((connection) => steps.closeConnection(connection)));
  await endpoint.release();
  clearTimeout(deadline);
  logger.info('stopped');
  // BullMQ's own connections of a worker closed during an outage keep reconnecting in the
  // background; nothing is left to do, so they must not keep the process alive.
  logger.flush();
  setTimeout(() => process.exit(process.exitCode ?? 0), 250).unref();
}

function collectRole(value: string, previous: Role[]): Role[] {
  if (!(ROLES as readonly string[]).includes(value)) throw new UsageError(`unknown role "${value}"; roles: ${ROLES.join(', ')}`);
  return [...previous, value as Role];
}

function buildProgram(env: NodeJS.ProcessEnv): Command {
  const program = new Command('hookline')
    .description('Hookline: signed, retried webhook deliveries of machine and deployment events, with an admin API.')
    .version(VERSION)
    .showHelpAfterError()
    .addHelpText('after', '\nConfiguration comes from environment variables; see README.md or .env.example.');

  const config = (): Config => loadConfig(env);
  const serverLogger = (c: Config) => createLogger({ level: c.logLevel, format: c.logFormat, fd: 1 });

  const serve = (role: EngineRole) => async () => {
    const c = config();
    await runEngine(c, serverLogger(c), role);
  };
  program
    .command('start')
    .description('Run the admin API and the delivery worker in one process; without REDIS_URL, start an embedded local Redis.')
    .action(serve('all'));
  program.command('api').description('Run only the admin API (with event ingest over HTTP).').action(serve('api'));
  program
    .command('worker')
    .description('Run only the delivery worker (and the ingest stream consumer), with /healthz on HOOKLINE_METRICS_PORT.')
    .action(serve('worker'));

  const keysCommand = program.command('keys').description('Issue, list and revoke API keys.');
  keysCommand
    .command('create')
    .description('Create an API key; prints only the key on stdout (it is shown once and stored only as a hash).')
    .requiredOption('--name <name>', 'who or what the key is for')
    .option('--vendor <vendorId>', 'the vendor whose webhooks the key manages (required with --role vendor)')
    .addOption(new Option('--role <role>', `a role, repeatable: ${ROLES.join(', ')}`).argParser(collectRole).default([]))
    .action(async (options: { name: string; vendor?: string; role: Role[] }) => {
      if (options.name.trim() === '') throw new UsageError('--name must not be empty');
      if (options.role.length === 0) throw new UsageError(`give at least one --role (${ROLES.join(', ')})`);
      if (options.vendor !== undefined && !EXTERNAL_ID_RE.test(options.vendor)) {
        throw new UsageError('--vendor must be 1-128 characters: letters, digits and . _ : @ -');
      }
      if (options.role.includes('vendor') && options.vendor === undefined) throw new UsageError('--role vendor needs --vendor <vendorId>');
      const c = config();
      await withRedis(c, 'hookline-cli', async (redis) => {
        const store = new RedisApiKeyStore(redis, redisKeys(c.redisPrefix));
        const { key, record } = await store.create({
          name: options.name.trim(),
          roles: options.role,
          ...(options.vendor === undefined ? {} : { vendorId: options.vendor }),
        });
        process.stdout.write(`${key}\n`);
        say(`created ${record.id} "${record.name}" with roles ${record.roles.join(', ')}${record.vendorId ? ` for vendor ${record.vendorId}` : ''}; the key is not shown again`);
      });
    });
  keysCommand
    .command('list')
    .description('List API keys (ids, names, vendors, roles; never the keys).')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      const c = config();
      await withRedis(c, 'hookline-cli', async (redis) => {
        const records = await new RedisApiKeyStore(redis, redisKeys(c.redisPrefix)).list();
        if (options.json) return void process.stdout.write(`${JSON.stringify(records, null, 2)}\n`);
        if (records.length === 0) return void say('no API keys');
        for (const r of records) {
          process.stdout.write(`${r.id}\t${r.name}\t${r.vendorId ?? '-'}\t${r.roles.join(',')}\t${r.createdAt}\n`);
        }
      });
    });
  keysCommand
    .command('revoke')
    .description('Revoke an API key by id (from keys list); it stops working at once.')
    .argument('<id>', 'key id, e.g. key_0123456789abcdef')
    .action(async (id: string) => {
      const c = config();
      await withRedis(c, 'hookline-cli', async (redis) => {
        if (!(await new RedisApiKeyStore(redis, redisKeys(c.redisPrefix)).revoke(id))) throw new UsageError(`no API key with id ${id}`);
        say(`revoked ${id}`);
      });
    });
  const dlq = program.command('dlq').description('List and replay dead letters (deliveries whose every attempt failed).');
  const withStores = async <T>(c: Config, body: (stores: Stores) => Promise<T>): Promise<T> =>
    withRedis(c, 'hookline-cli', async (redis, endpoint) => {
      const queueConnection = connectRedis(endpoint.url, { connectionName: 'hookline-cli-queues', maxRetriesPerRequest: 3, autoPipelining: false });
      const stores = composeStores({
        redis,
        queueConnection,
        redisPrefix: c.redisPrefix,
        secretKey: resolveSecretKey(c),
        retryScheduleMs: c.retryScheduleMs,
        queuePartitions: c.queuePartitions,
        secretRotationOverlapMs: c.secretRotationOverlapMs,
        dedupeWindowMs: c.dedupeWindowMs,
      });
      try {
        return await body(stores);
      } finally {
        await stores.queues.close();
        await queueConnection.quit().catch(() => undefined);
      }
    });
  const knownWebhook = async (stores: Stores, webhookId: string) => {
    const webhook = await stores.webhooks.getById(webhookId);
    if (!webhook) throw new UsageError(`no webhook with id ${webhookId}`);
    return webhook;
  };
  dlq
    .command('list')
    .description('List a webhook’s dead letters, newest first.')
    .requiredOption('--webhook <webhookId>', 'the webhook')
    .option('--limit <n>', 'how many (1-1000)', '50')
    .option('--json', 'print JSON')
    .action(async (options: { webhook: string; limit: string; json?: boolean }) => {
      const limit = Number(options.limit);
      if (!Number.isInteger(limit) || limit < 1 || limit > 1000) throw new UsageError('--limit must be a whole number from 1 to 1000');
      await withStores(config(), async (stores) => {
        await knownWebhook(stores, options.webhook);
        const dead = await stores.deliveryLog.deadLetters(options.webhook, limit);
        if (options.json) return void process.stdout.write(`${JSON.stringify(dead, null, 2)}\n`);
        if (dead.length === 0) return void say('no dead letters');
        for (const d of dead) {
          process.stdout.write(`${d.deliveryId}\t${d.eventId}\t${d.eventType}\t${d.attempts} attempts\t${d.lastOutcome ?? '-'}\t${new Date(d.updatedAtMs).toISOString()}\n`);
        }
      });
    });
  dlq
    .command('replay')
    .description('Replay one dead letter (--delivery) or all of a webhook’s, showing progress; a running worker delivers them.')
    .requiredOption('--webhook <webhookId>', 'the webhook')
    .option('--delivery <deliveryId>', 'replay only this dead letter')
    .action(async (options: { webhook: string; delivery?: string }) => {
      await withStores(config(), async (stores) => {
        await knownWebhook(stores, options.webhook);
        if (options.delivery !== undefined) {
          const result = await stores.replayer.replayOne(options.webhook, options.delivery);
          if (!result.ok) throw new UsageError(result.reason === 'not_found' ? `no delivery ${options.delivery}` : `${options.delivery} is not a dead letter`);
          process.stdout.write(`${result.deliveryId}\n`);
          return say(`queued ${result.deliveryId} replaying ${options.delivery}`);
        }
        const taskId = await stores.replayer.createTask();
        say(`task ${taskId}`);
        const { replayed, skipped } = await stores.replayer.runReplayAll(taskId, options.webhook, {
          onProgress: (done, total) => process.stderr.write(`\rreplayed ${done}/${total}`),
        });
        process.stderr.write('\n');
        process.stdout.write(`${replayed}\n`);
        say(`queued ${replayed} replays${skipped > 0 ? ` (${skipped} dead letters had expired and were dropped)` : ''}`);
      });
    });
  return program;
}

/** Entry point: parse argv, run the command, print user errors without stack traces. */
export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  try {
    await buildProgram(env).parseAsync(argv);
    return 0;
  } catch (error) {
    if (error instanceof UsageError || error instanceof ConfigError || error instanceof RedisServerUnavailableError) {
      say(`hookline: ${error.message}`);
      return error instanceof UsageError ? 2 : 1;
    }
    say(`hookline: ${error instanceof Error ? (error.stack ?? error.message) : String(error)}`);
    return 1;
  }
}

process.exitCode = await main(process.argv, process.env);
