#!/usr/bin/env node
import { Command, Option } from 'commander';
import { ConfigError, loadConfig, type Config } from './config/env.js';
import { EXTERNAL_ID_RE } from './domain/ids.js';
import { ROLES, type Role } from './domain/roles.js';
import { createLogger, type Logger } from './logger.js';
import { buildAdminServer } from './admin/server.js';
import { RedisApiKeyStore } from './store/api-keys.js';
import { resolveRedis, resolveSecretKey, type RedisEndpoint } from './store/embedded.js';
import { redisKeys } from './store/keys.js';
import { RedisMachineStore } from './store/machines.js';
import { createAgentStatusStore, createTaskStore } from './store/read-models.js';
import { RedisServerUnavailableError } from './store/redis-server.js';
import { connectRedis, pingRedis, type Redis } from './store/redis.js';
import { SecretBox } from './store/secret-box.js';
import { RedisWebhookStore } from './store/webhooks.js';
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

/** `hookline start` / `hookline api`: serve the admin API until a shutdown signal. */
async function serveApi(config: Config, logger: Logger): Promise<void> {
  const secretKey = resolveSecretKey(config);
  const endpoint = await resolveRedis(config, (line) => logger.info(line));
  const redis = connectRedis(endpoint.url, { connectionName: 'hookline-api', maxRetriesPerRequest: 2 });
  redis.on('error', (error: Error) => logger.warn({ err: error.message }, 'redis connection error'));
  const keys = redisKeys(config.redisPrefix);
  const machines = new RedisMachineStore(redis, keys);
  // Load the listing's in-memory index now rather than on the first request.
  await machines.refresh();
  const app = await buildAdminServer({
    logger,
    bodyLimitBytes: config.apiBodyLimitBytes,
    apiKeys: new RedisApiKeyStore(redis, keys),
    webhooks: new RedisWebhookStore(redis, keys, new SecretBox(secretKey)),
    tasks: createTaskStore(redis, keys),
    agents: createAgentStatusStore(redis, keys),
    machines,
    isReady: () => pingRedis(redis, 1_000),
  });
  const address = await app.listen({ host: config.apiHost, port: config.apiPort });
  logger.info(
    { redis: endpoint.origin === 'configured' ? 'REDIS_URL' : `embedded ${endpoint.url} (data in ${config.dataDir}/redis)`, version: VERSION },
    `Hookline API listening on ${address} (OpenAPI at ${address}/openapi.json, docs at ${address}/docs)`,
  );
  const signal = await shutdownSignal();
  logger.info({ signal }, 'shutting down');
  await app.close();
  await redis.quit().catch(() => undefined);
  await endpoint.release();
  logger.info('stopped');
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

  const serve = async () => {
    const c = config();
    await serveApi(c, serverLogger(c));
  };
  program
    .command('start')
    .description('Run the engine in one process; without REDIS_URL, start an embedded local Redis.')
    .action(serve);
  program.command('api').description('Run only the admin API.').action(serve);

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
