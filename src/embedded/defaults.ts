import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, realpathSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import type { Config } from '../config/env.js';
import { ConfigError } from '../config/env.js';
import { ensureRedisServerBinary, startRedisServer } from './redis-server.js';

/** Where a process's Redis comes from, and how to let go of it. */
export interface RedisEndpoint {
  url: string;
  /** `REDIS_URL`, an embedded server this process started, or one another Hookline process runs. */
  origin: 'configured' | 'embedded-started' | 'embedded-shared';
  /** Stops the embedded server when this process started it; otherwise does nothing. */
  release(): Promise<void>;
}

/**
 * `<HOOKLINE_DATA_DIR>/redis.json`: where the embedded Redis of this data folder listens while a
 * Hookline process runs it (`url`, `port`, and `pid`, the process that started it), so that every
 * command finds it from any folder; once it stops, only `port`, to use the same one next time.
 */
interface EmbeddedState {
  port: number;
  url?: string;
  pid?: number;
}

const stateFile = (config: Config) => path.join(config.dataDir, 'redis.json');
const redisDir = (config: Config) => path.join(config.dataDir, 'redis');

/** No engine data where the CLI looked: nothing runs there and nothing ever ran there. */
export class NoEngineDataError extends Error {
  override name = 'NoEngineDataError';
}

/**
 * Whether the Redis answering on `port` is the embedded Redis of `dir`: a port remembered from an
 * earlier run may since belong to another Redis (another data folder's, or any other).
 */
async function embeddedRedisOf(dir: string, port: number): Promise<boolean> {
  const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1_000 });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    const [, served] = (await probe.config('GET', 'dir')) as [string, string];
    // Redis reports the folder it changed into, with symbolic links resolved.
    return served === realpathSync(dir);
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

function readState(config: Config): EmbeddedState | undefined {
  try {
    const state = JSON.parse(readFileSync(stateFile(config), 'utf8')) as Partial<EmbeddedState>;
    if (typeof state.port !== 'number') return undefined;
    return { port: state.port, ...(typeof state.url === 'string' ? { url: state.url } : {}), ...(typeof state.pid === 'number' ? { pid: state.pid } : {}) };
  } catch {
    return undefined;
  }
}

function writeState(config: Config, state: EmbeddedState): void {
  mkdirSync(config.dataDir, { recursive: true });
  writeFileSync(stateFile(config), `${JSON.stringify(state)}\n`);
}

export interface ResolveRedisOptions {
  /**
   * Start the embedded Redis even where no engine ever kept data (`hookline start`, `keys
   * create`); otherwise (the commands that read what an engine wrote) that is a NoEngineDataError.
   */
  createData: boolean;
}

/**
 * `REDIS_URL` when set; otherwise the embedded default: the local redis-server of this data folder,
 * reused when another Hookline process already runs it, else started here (loopback only, AOF on,
 * data in `<HOOKLINE_DATA_DIR>/redis`, on the port it had last time when that is free), and
 * stopped again by release().
 */
export async function resolveRedis(config: Config, say: (line: string) => void, options: ResolveRedisOptions): Promise<RedisEndpoint> {
  if (config.redisUrl !== undefined) return { url: config.redisUrl, origin: 'configured', release: async () => undefined };

  const dir = redisDir(config);
  const existing = readState(config);
  if (existing && (await embeddedRedisOf(dir, existing.port))) {
    return { url: `redis://127.0.0.1:${existing.port}`, origin: 'embedded-shared', release: async () => undefined };
  }
  if (!options.createData && !existsSync(dir)) {
    throw new NoEngineDataError(
      `no Hookline engine data found in ${config.dataDir} (no engine runs there, and none has run there). ` +
        'Point this command at the engine: REDIS_URL=redis://host:port when it uses a Redis of its own, or ' +
        'HOOKLINE_DATA_DIR=<its data folder> when it runs the embedded Redis (its start-up line names the folder as dataDir).',
    );
  }

  const binary = await ensureRedisServerBinary(say);
  const port = config.embeddedRedisPort !== 0 ? config.embeddedRedisPort : (existing?.port ?? 0);
  // A remembered port may have been taken meanwhile; fall back to a free one.
  const server = await startRedisServer({ binary, port, dir, appendOnly: true }).catch((error: unknown) => {
    if (port === 0 || config.embeddedRedisPort !== 0) throw error;
    return startRedisServer({ binary, port: 0, dir, appendOnly: true });
  });
  writeState(config, { url: server.url, port: server.port, pid: process.pid });
  return {
    url: server.url,
    origin: 'embedded-started',
    async release() {
      await server.stop();
      writeState(config, { port: server.port });
    },
  };
}

/**
 * The AES key for webhook secrets: `HOOKLINE_SECRET_KEY` when set; with the embedded default, one
 * generated once and kept in `<HOOKLINE_DATA_DIR>/secret.key` (mode 0600).
 */
export function resolveSecretKey(config: Config): Buffer {
  if (config.secretKey !== undefined) return config.secretKey;
  if (config.redisUrl !== undefined) {
    throw new ConfigError('Invalid configuration:\n  HOOKLINE_SECRET_KEY: required when REDIS_URL is set (32 random bytes in base64: openssl rand -base64 32)');
  }
  mkdirSync(config.dataDir, { recursive: true });
  const file = path.join(config.dataDir, 'secret.key');
  if (!existsSync(file)) {
    try {
      writeFileSync(file, randomBytes(32).toString('base64') + '\n', { mode: 0o600, flag: 'wx' });
    } catch (error) {
      // Another process created it first: use theirs.
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
  }
  const key = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  if (key.length !== 32) throw new ConfigError(`Invalid configuration:\n  ${file}: expected 32 bytes in base64`);
  return key;
}
