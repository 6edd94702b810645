#!/usr/bin/env node
import { userInfo } from 'node:os';
import { Command, Option } from 'commander';
import { addOperatorCommands, addPortalCommands } from './cli/operator.js';
import { checkSecretKeyAtStart, engineEntry, joinRunningEngines, secondStartRefusal } from './cli/engine-checks.js';
import { CliError, failure, listenFailure, UsageError } from './cli/errors.js';
import { exitQuietlyWhenStdoutCloses, printJson, printTable, say, toApiKeyResource } from './cli/output.js';
import { startupLine } from './cli/startup.js';
import { TIME_OPTION_FORMS, timeOptionMs } from './cli/time-option.js';
import { settle, withStores } from './cli/stores.js';
import { loadConfig, type Config } from './config/env.js';
import { DELIVERY_STATUSES, type DeliveryStatus } from './domain/delivery.js';
import { EXTERNAL_ID_RE } from './domain/ids.js';
import type { RangeReplaySpec } from './tasks/range-replay.js';
import { portalLinkBase } from './domain/portal-link.js';
import { ROLES, type Role } from './domain/roles.js';
import { createLogger, type Logger } from './logger.js';
import { createEngine, SHUTDOWN_SLACK_MS, type Engine, type EngineRole, type Stores } from './engine/index.js';
import { VERSION } from './version.js';

/** `withStores` for the key commands. */
function withApiKeys<T>(
  config: Config,
  body: (apiKeys: Stores['apiKeys']) => Promise<T>,
  createData = false,
): Promise<T> {
  return withStores(config, (stores) => body(stores.apiKeys), { createData });
}

/** Who ran a command, for the audit lines of key changes: the operating-system user. */
function operator(): string {
  try {
    return userInfo().username;
  } catch {
    // A container user without a passwd entry.
    return `uid ${process.getuid?.() ?? 'unknown'}`;
  }
}

/** Whether `redis` has been ready at least once since this call. */
function everReady(redis: Stores['redis']): () => boolean {
  let ready = redis.status === 'ready';
  redis.once('ready', () => (ready = true));
  return () => ready;
}

/** The signals that end a serving process: Ctrl-C, a stop (`kill`, a container runtime) and a closed terminal. */
const STOP_SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP'] as const;

/** Resolves on the first of SIGINT, SIGTERM or SIGHUP from now on. */
function shutdownSignal(): Promise<NodeJS.Signals> {
  return new Promise((resolve) => {
    for (const signal of STOP_SIGNALS) process.once(signal, () => resolve(signal));
  });
}

/**
 * Runs the admin API, the delivery worker, or both, until SIGINT, SIGTERM or SIGHUP; then shuts
 * down in order. However it ends (a signal, a second one, a start-up that failed) the embedded
 * Redis it started stops too.
 */
async function runEngine(base: Config, logger: Logger, role: Exclude<EngineRole, 'tools'>): Promise<void> {
  // Listening from the first moment: a signal during start-up ends it in order once it is up, rather
  // than killing the process around the embedded Redis it is starting.
  const stop = shutdownSignal();
  const { config, endpoint } = await settle(base, (line) => logger.info(line), {
    createData: true,
    needsSecretKey: true,
  });
  let engine: Engine | undefined;
  // Ends the checks that wait for Redis to answer.
  const checks = new AbortController();
  try {
    if (role === 'all' && endpoint.origin === 'embedded-shared') throw await secondStartRefusal(config, endpoint);
    engine = await createEngine(config, { role, logger, listen: true });
    const connected = everReady(engine.stores.redis);
    const keyMismatch = (await checkSecretKeyAtStart(engine.stores, base, config, checks.signal)).later;
    const addresses = await engine.start().catch((error: unknown) => {
      throw listenFailure(error, config);
    });
    const started = startupLine({ role, config, redis: endpoint, addresses });
    logger[started.level](started.fields, started.msg);
    const joined = joinRunningEngines(engine.stores, engineEntry(role, config, addresses.api), logger, checks.signal);

    const ended = await Promise.race([
      stop.then((signal) => ({ signal })),
      keyMismatch.then((mismatch) => ({ mismatch })),
    ]);
    checks.abort();
    await joined.leave();
    // A process whose Redis never answered has taken no job: nothing can be in flight to wait for.
    const graceMs = connected() ? config.shutdownGraceMs : 0;
    if ('mismatch' in ended)
      logger.error({ event: 'secret_key.mismatch', graceMs }, `${ended.mismatch}; shutting down`);
    else logger.info({ signal: ended.signal, graceMs }, 'shutting down');
    // The engine's shutdown is bounded, but a process must end however it is stuck: this is the
    // backstop (the embedded Redis is stopped on the way out, see startRedisServer).
    const deadline = setTimeout(() => {
      logger.error(
        { graceMs },
        'shutdown did not finish in time; exiting now (unfinished deliveries return to the queue when their locks expire)',
      );
      logger.flush();
      process.exit(1);
    }, graceMs + SHUTDOWN_SLACK_MS);
    deadline.unref();
    // A second signal means "now".
    for (const again of STOP_SIGNALS) process.once(again, () => process.exit(1));
    const closing = engine;
    engine = undefined;
    await closing.close(graceMs);
    await endpoint.release();
    clearTimeout(deadline);
    logger.info('stopped');
    if ('mismatch' in ended) throw new CliError(ended.mismatch);
  } finally {
    checks.abort();
    // A start-up that failed: what did start stops (an engine's close is bounded whatever Redis does).
    await engine?.close(0);
    await endpoint.release();
    logger.flush();
    // BullMQ's own connections of a worker closed during an outage keep reconnecting in the
    // background; nothing is left to do, so they must not keep the process alive.
    setTimeout(() => process.exit(process.exitCode ?? 0), 250).unref();
  }
}

/** `1 replay`, `2 replays`. */
const plural = (count: number, noun: string) => `${count} ${noun}${count === 1 ? '' : 's'}`;

function collectRole(value: string, previous: Role[]): Role[] {
  if (!(ROLES as readonly string[]).includes(value))
    throw new UsageError(`unknown role "${value}"; roles: ${ROLES.join(', ')}`);
  return [...previous, value as Role];
}

function buildProgram(env: NodeJS.ProcessEnv): Command {
  const program = new Command('hookline')
    .description('Hookline: signed, retried webhook deliveries of machine and deployment events, with an admin API.')
    .version(VERSION)
    // Commander would exit 1 on a usage error itself; main() answers 2 as the README's CLI table promises.
    .exitOverride()
    .showHelpAfterError()
    .addHelpText(
      'after',
      '\nConfiguration comes from environment variables; see docs/configuration.md or .env.example.',
    );

  const config = (): Config => loadConfig(env);
  const serverLogger = (c: Config) => createLogger({ level: c.logLevel, format: c.logFormat, fd: 1 });
  // A command's stdout is its result: its log lines (the audit lines of key changes) go to stderr.
  const commandLogger = (c: Config) => createLogger({ level: c.logLevel, format: c.logFormat, fd: 2 });

  const serve = (role: Exclude<EngineRole, 'tools'>) => async () => {
    const c = config();
    await runEngine(c, serverLogger(c), role);
  };
  program
    .command('start')
    .description(
      'Run the admin API and the delivery worker in one process; without REDIS_URL, start an embedded local Redis.',
    )
    .action(serve('all'));
  program.command('api').description('Run only the admin API (with event ingest over HTTP).').action(serve('api'));
  program
    .command('worker')
    .description(
      'Run only the delivery worker (and the ingest stream consumer), with /healthz on HOOKLINE_METRICS_PORT.',
    )
    .action(serve('worker'));

  const keysCommand = program.command('keys').description('Issue, list and revoke API keys.');
  keysCommand
    .command('create')
    .description('Create an API key; prints only the key on stdout (it is shown once and stored only as a hash).')
    .requiredOption('--name <name>', 'who or what the key is for')
    .option('--vendor <vendorId>', 'the vendor whose webhooks the key manages (required with --role vendor)')
    .addOption(
      new Option('--role <role>', `a role, repeatable: ${ROLES.join(', ')}`).argParser(collectRole).default([]),
    )
    .action(async (options: { name: string; vendor?: string; role: Role[] }) => {
      if (options.name.trim() === '') throw new UsageError('--name must not be empty');
      if (options.role.length === 0) throw new UsageError(`give at least one --role (${ROLES.join(', ')})`);
      if (options.vendor !== undefined && !EXTERNAL_ID_RE.test(options.vendor)) {
        throw new UsageError('--vendor must be 1-128 characters: letters, digits and . _ : @ -');
      }
      if (options.role.includes('vendor') && options.vendor === undefined)
        throw new UsageError('--role vendor needs --vendor <vendorId>');
      const c = config();
      await withApiKeys(
        c,
        async (apiKeys) => {
          const { key, record } = await apiKeys.create({
            name: options.name.trim(),
            roles: options.role,
            ...(options.vendor === undefined ? {} : { vendorId: options.vendor }),
          });
          process.stdout.write(`${key}\n`);
          commandLogger(c).info(
            {
              event: 'api_key.created',
              keyId: record.id,
              keyName: record.name,
              vendorId: record.vendorId,
              roles: record.roles,
              by: operator(),
            },
            `created ${record.id} "${record.name}" with roles ${record.roles.join(', ')}${record.vendorId ? ` for vendor ${record.vendorId}` : ''}; the key is not shown again`,
          );
        },
        true,
      );
    });
  keysCommand
    .command('list')
    .description('List API keys (ids, names, vendors, roles; never the keys).')
    .option('--json', 'print JSON')
    .action(async (options: { json?: boolean }) => {
      const c = config();
      await withApiKeys(c, async (apiKeys) => {
        const records = await apiKeys.list();
        if (options.json) return printJson({ api_keys: records.map(toApiKeyResource) });
        if (records.length === 0) return void say('no API keys');
        printTable(
          ['KEY', 'NAME', 'VENDOR', 'ROLES', 'CREATED'],
          records.map((r) => [r.id, r.name, r.vendorId ?? '-', r.roles.join(','), r.createdAt]),
        );
      });
    });
  keysCommand
    .command('revoke')
    .description('Revoke an API key by id (from keys list); it stops working at once.')
    .argument('<id>', 'key id, e.g. key_0123456789abcdef')
    .action(async (id: string) => {
      const c = config();
      await withApiKeys(c, async (apiKeys) => {
        const revoked = await apiKeys.revoke(id);
        if (!revoked) throw new UsageError(`no API key with id ${id}`);
        commandLogger(c).info(
          { event: 'api_key.revoked', keyId: id, keyName: revoked.name, vendorId: revoked.vendorId, by: operator() },
          `revoked ${id} "${revoked.name}"`,
        );
      });
    });
  const dlq = program
    .command('dlq')
    .description('List and replay dead letters (deliveries whose every attempt failed).');
  const knownWebhook = async (stores: Stores, webhookId: string) => {
    const webhook = await stores.webhooks.getById(webhookId);
    if (!webhook) throw new UsageError(`no webhook with id ${webhookId}`);
    return webhook;
  };
  const operatorContext = {
    withStores: <T>(body: (stores: Stores, redisUrl: string) => Promise<T>) => withStores(config(), body),
    usageError: (message: string) => new UsageError(message),
    interrupted: shutdownSignal,
    publicBaseUrl: () => {
      const c = config();
      const base = portalLinkBase(c.publicUrl, { host: c.apiHost, port: c.apiPort });
      if (base === undefined) {
        throw new CliError(
          c.publicUrl === undefined
            ? `HOOKLINE_PUBLIC_URL is not set and the API listens on ${c.apiHost}, not on loopback: set it to where vendors' browsers reach the API (e.g. https://hooks.example.com)`
            : `HOOKLINE_PUBLIC_URL is ${c.publicUrl}: portal links need an https address (plain http only on loopback), since browsers keep the portal's Secure session cookie only there`,
        );
      }
      return base;
    },
    audit: (fields: Record<string, unknown>, message: string) => {
      const c = config();
      commandLogger(c).info({ ...fields, by: operator() }, message);
    },
  };
  addOperatorCommands(program, dlq, operatorContext);
  addPortalCommands(program, operatorContext);
  dlq
    .command('replay')
    .description(
      'Replay one dead letter (--delivery) or all of a webhook’s, showing progress; a running worker delivers them.',
    )
    .requiredOption('--webhook <webhookId>', 'the webhook')
    .option('--delivery <deliveryId>', 'replay only this dead letter')
    .action(async (options: { webhook: string; delivery?: string }) => {
      await withStores(config(), async (stores) => {
        const webhook = await knownWebhook(stores, options.webhook);
        if (options.delivery !== undefined) {
          const result = await stores.replayer.replayOne(options.webhook, options.delivery);
          if (!result.ok)
            throw new UsageError(
              result.reason === 'not_found'
                ? `no delivery ${options.delivery}`
                : `${options.delivery} is not a dead letter`,
            );
          process.stdout.write(`${result.deliveryId}\n`);
          return say(`queued ${result.deliveryId} replaying ${options.delivery}`);
        }
        const taskId = await stores.replayer.createTask(webhook.vendorId, webhook.id);
        say(`task ${taskId}`);
        // Progress rewrites one line on a terminal; where stderr is a file or a pipe (a log), only the end shows.
        const terminal = process.stderr.isTTY;
        const { replayed, skipped } = await stores.replayer.runReplayAll(taskId, options.webhook, {
          ...(terminal
            ? { onProgress: (done: number, total: number) => void process.stderr.write(`\rqueued ${done}/${total}`) }
            : {}),
        });
        if (terminal) process.stderr.write('\n');
        process.stdout.write(`${replayed}\n`);
        const expired =
          skipped > 0
            ? ` (${plural(skipped, 'dead letter')} had expired and ${skipped === 1 ? 'was' : 'were'} dropped)`
            : '';
        say(
          `queued ${plural(replayed, 'replay')} for a running worker to deliver${expired}; follow them with: hookline deliveries tail --webhook ${webhook.id}`,
        );
      });
    });
  program
    .command('replay')
    .description(
      'Replay the events a webhook’s event feed holds in a time range (each as a new delivery), showing progress; a running worker delivers them.',
    )
    .requiredOption('--webhook <webhookId>', 'the webhook')
    .requiredOption(
      '--since <time>',
      'events accepted at or after this time: ISO 8601 (2026-11-24T10:00:00Z), or a time ago (30m, 2h, 3d)',
    )
    .option('--until <time>', 'and at or before this time, in the same forms (default: now)')
    .option(
      '--status <statuses>',
      `only events whose delivery has one of these statuses (comma-separated: ${DELIVERY_STATUSES.join(', ')})`,
    )
    .option('--rate <perSecond>', 'replays queued per second at most')
    .option('--dry-run', 'count the events, replay nothing')
    .action(
      async (options: {
        webhook: string;
        since: string;
        until?: string;
        status?: string;
        rate?: string;
        dryRun?: boolean;
      }) => {
        const spec = rangeReplaySpec(options);
        await withStores(config(), async (stores) => {
          const webhook = await knownWebhook(stores, options.webhook);
          // The operator's own process: the whole range, however long (the API's counts are capped).
          const { count } = await stores.rangeReplayer.count(webhook.id, spec, Infinity);
          if (options.dryRun) {
            process.stdout.write(`${count}\n`);
            return say(`${plural(count, 'event')} would be replayed (dry run: nothing was sent)`);
          }
          const taskId = await stores.rangeReplayer.createTask(webhook.vendorId, webhook.id);
          say(`task ${taskId}: replaying ${plural(count, 'event')}`);
          const terminal = process.stderr.isTTY;
          const { replayed } = await stores.rangeReplayer.run(
            { taskId, vendorId: webhook.vendorId, webhookId: webhook.id, ...spec },
            {
              settle: false,
              ...(terminal
                ? {
                    onProgress: (done: number, total: number) => void process.stderr.write(`\rqueued ${done}/${total}`),
                  }
                : {}),
            },
          );
          if (terminal) process.stderr.write('\n');
          process.stdout.write(`${replayed}\n`);
          operatorContext.audit(
            {
              event: 'operator.replay_started',
              vendorId: webhook.vendorId,
              webhookId: webhook.id,
              taskId,
              count: replayed,
            },
            `an operator replayed ${plural(replayed, 'event')} of webhook ${webhook.id}`,
          );
          say(
            `queued ${plural(replayed, 'replay')} for a running worker to deliver; follow them with: hookline deliveries tail --webhook ${webhook.id}`,
          );
        });
      },
    );
  dlq
    .command('cancel')
    .description(
      'Cancel a bulk replay (a task from the API, the portal or dlq replay): it stops before its next page; replays already queued are delivered.',
    )
    .requiredOption('--task <taskId>', 'the replay task')
    .action(async (options: { task: string }) => {
      await withStores(config(), async (stores) => {
        const outcome = await stores.replayTasks.cancel(options.task.toLowerCase(), undefined);
        if (outcome === 'not_found') throw new UsageError(`no bulk replay task ${options.task}`);
        if (outcome === 'finished') throw new UsageError(`task ${options.task} has ended already`);
        operatorContext.audit(
          { event: 'operator.replay_cancelled', taskId: options.task },
          `an operator cancelled bulk replay ${options.task}`,
        );
        say(
          `cancelled ${options.task}: it stops before its next page; follow it with GET /rental/v1/tasks/${options.task}`,
        );
      });
    });
  return program;
}

/** Entry point: parse argv, run the command, print user errors without stack traces. */
export async function main(argv: string[], env: NodeJS.ProcessEnv): Promise<number> {
  exitQuietlyWhenStdoutCloses();
  try {
    await buildProgram(env).parseAsync(argv);
    return 0;
  } catch (error) {
    const { exitCode, message } = failure(error);
    if (message !== undefined) say(`hookline: ${message}`);
    return exitCode;
  }
}

process.exitCode = await main(process.argv, process.env);

/** The range replay the `replay` command's options ask for; a usage error for a bad time, status or rate. */
function rangeReplaySpec(options: { since: string; until?: string; status?: string; rate?: string }): RangeReplaySpec {
  // One now for both: `--since 2h --until 0s` is exactly two hours.
  const nowMs = Date.now();
  const time = (name: string, text: string) => {
    const ms = timeOptionMs(text, nowMs);
    if (ms === undefined) throw new UsageError(`--${name} must be ${TIME_OPTION_FORMS}, not "${text.slice(0, 64)}"`);
    return ms;
  };
  const sinceMs = time('since', options.since);
  const untilMs = options.until === undefined ? nowMs : time('until', options.until);
  if (sinceMs > untilMs) throw new UsageError('--since is after --until');
  const statuses = options.status?.split(',').map((s) => s.trim());
  const unknown = statuses?.filter((s) => !(DELIVERY_STATUSES as readonly string[]).includes(s)) ?? [];
  if (unknown.length > 0)
    throw new UsageError(`--status: unknown ${unknown.join(', ')} (expected ${DELIVERY_STATUSES.join(', ')})`);
  const rate = options.rate === undefined ? undefined : Number(options.rate);
  if (rate !== undefined && !(Number.isInteger(rate) && rate >= 1 && rate <= 10_000))
    throw new UsageError('--rate must be a whole number from 1 to 10000');
  return {
    sinceMs,
    untilMs,
    ...(statuses === undefined ? {} : { statuses: statuses as DeliveryStatus[] }),
    ...(rate === undefined ? {} : { ratePerSecond: rate }),
  };
}
