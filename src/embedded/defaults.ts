import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
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

interface EmbeddedState {
  port: number;
  pid: number;
}

const stateFile = (config: Config) => path.join(config.dataDir, 'redis.json');

async function answersPing(port: number): Promise<boolean> {
  const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null, connectTimeout: 1_000 });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    return (await probe.ping()) === 'PONG';
  } catch {
    return false;
  } finally {
    probe.disconnect();
  }
}

function readState(config: Config): EmbeddedState | undefined {
  try {
    const state = JSON.parse(readFileSync(stateFile(config), 'utf8')) as Partial<EmbeddedState>;
    return typeof state.port === 'number' && typeof state.pid === 'number' ? { port: state.port, pid: state.pid } : undefined;
  } catch {
    return undefined;
  }
}

/**
 * `REDIS_URL` when set; otherwise the embedded default: the local redis-server of this data folder,
 * reused when another Hookline process already runs it, else started here (loopback only, AOF on,
 * data in `<HOOKLINE_DATA_DIR>/redis`), and stopped again by release().
 */
export async function resolveRedis(config: Config, say: (line: string) => void): Promise<RedisEndpoint> {
  if (config.redisUrl !== undefined) return { url: config.redisUrl, origin: 'configured', release: async () => undefined };

  const existing = readState(config);
  if (existing && (await answersPing(existing.port))) {
    return { url: `redis://127.0.0.1:${existing.port}`, origin: 'embedded-shared', release: async () => undefined };
  }

  const binary = await ensureRedisServerBinary(say);
  const port = config.embeddedRedisPort !== 0 ? config.embeddedRedisPort : (existing?.port ?? 0);
  const dir = path.join(config.dataDir, 'redis');
  // A remembered port may have been taken meanwhile; fall back to a free one.
  const server = await startRedisServer({ binary, port, dir, appendOnly: true }).catch((error: unknown) => {
    if (port === 0 || config.embeddedRedisPort !== 0) throw error;
    return startRedisServer({ binary, port: 0, dir, appendOnly: true });
  });
  writeFileSync(stateFile(config), JSON.stringify({ port: server.port, pid: process.pid } satisfies EmbeddedState));
  return {
    url: server.url,
    origin: 'embedded-started',
    async release() {
      await server.stop();
      rmSync(stateFile(config), { force: true });
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
