import { randomBytes } from 'node:crypto';
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readFileSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
} from 'node:fs';
import path from 'node:path';
import { Redis } from 'ioredis';
import type { Config } from '../config/env.js';
import { ConfigError } from '../config/env.js';
import { redisUrlForLog } from '../config/redis-url.js';
import { ensureRedisServerBinary, RedisPortTakenError, startRedisServer } from './redis-server.js';

/** Where a process's Redis comes from, and how to let go of it. */
export interface RedisEndpoint {
  /** With the embedded Redis's password, when it has one: never log it as it is (redisUrlForLog). */
  url: string;
  /** `REDIS_URL`, an embedded server this process runs, or one another Hookline process runs. */
  origin: 'configured' | 'embedded-started' | 'embedded-shared';
  /** With `embedded-shared`: the process that runs the data folder's Redis. */
  sharedWithPid?: number;
  /** Stops the embedded server when this process runs it; otherwise does nothing. Calls after the first do nothing. */
  release(): Promise<void>;
}

/**
 * `<HOOKLINE_DATA_DIR>/redis.json`: the data folder's embedded Redis, so that every command finds
 * it from any folder. `id` (random, also stored in that Redis: it proves a server is this folder's
 * own) and `port` (used again next time) stay; while a Hookline process runs the server, also `url`
 * (without the password), `pid` (that process) and `redisPid` (the redis-server). A state written
 * before ids existed has none.
 */
export interface EmbeddedState {
  port: number;
  id?: string;
  url?: string;
  pid?: number;
  redisPid?: number;
}

const stateFile = (config: Config) => path.join(config.dataDir, 'redis.json');
const redisDir = (config: Config) => path.join(config.dataDir, 'redis');
const passwordFile = (config: Config) => path.join(config.dataDir, 'redis.password');

/**
 * The key of the embedded Redis that holds its data folder's id. Outside every prefix on purpose: it
 * names the server, not one installation's keys in it, so every command on the folder finds it
 * whatever HOOKLINE_REDIS_PREFIX it runs with.
 */
const DATA_DIR_ID_KEY = 'hookline:data-dir-id';

/** No engine data where the CLI looked: nothing runs there and nothing ever ran there. */
export class NoEngineDataError extends Error {
  override name = 'NoEngineDataError';
}

/** The embedded Redis cannot start: its port is taken, or another process has been starting it for too long. */
export class EmbeddedRedisError extends Error {
  override name = 'EmbeddedRedisError';
}

/** Whether process `pid` is alive (it may belong to another user: then it is alive too). */
function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'EPERM';
  }
}

const loopbackUrl = (port: number, password: string | undefined) =>
  password === undefined ? `redis://127.0.0.1:${port}` : `redis://:${password}@127.0.0.1:${port}`;

/**
 * The Redis answering on the state's port, when it is this data folder's own: it takes the folder's
 * password, and holds the folder's id (a state from before ids: it serves the folder's files).
 * A port remembered from an earlier run may since belong to any other Redis, another Hookline
 * installation's included, whose data must never be shown or changed.
 */
async function ownRedisAt(
  config: Config,
  state: EmbeddedState,
  password: string | undefined,
): Promise<{ url: string; redisPid: number } | undefined> {
  const probe = new Redis({
    host: '127.0.0.1',
    port: state.port,
    lazyConnect: true,
    // No ready check: it runs before AUTH, which a server with a password refuses it.
    enableReadyCheck: false,
    maxRetriesPerRequest: 0,
    retryStrategy: () => null,
    connectTimeout: 1_000,
  });
  probe.on('error', () => undefined);
  try {
    await probe.connect();
    let authenticated = false;
    if (password !== undefined) {
      try {
        // By hand: given as an option, ioredis prints a warning when a server without a password answers.
        await probe.call('AUTH', password);
        authenticated = true;
      } catch (error) {
        // Another password: another installation's. No password: one an earlier version started, or not ours (the checks below tell).
        if (!/without any password|no password is set/i.test((error as Error).message)) return undefined;
      }
    }
    const ours =
      state.id !== undefined
        ? (await probe.get(DATA_DIR_ID_KEY)) === state.id
        : ((await probe.config('GET', 'dir')) as [string, string])[1] === realpathSync(redisDir(config));
    if (!ours) return undefined;
    const redisPid = Number(/^process_id:(\d+)/m.exec(await probe.info('server'))?.[1]);
    return { url: loopbackUrl(state.port, authenticated ? password : undefined), redisPid };
  } catch {
    return undefined;
  } finally {
    probe.disconnect();
  }
}

function readState(config: Config): EmbeddedState | undefined {
  try {
    const state = JSON.parse(readFileSync(stateFile(config), 'utf8')) as Partial<EmbeddedState>;
    if (typeof state.port !== 'number') return undefined;
    const number = (value: unknown) => (typeof value === 'number' ? value : undefined);
    return {
      port: state.port,
      ...(typeof state.id === 'string' ? { id: state.id } : {}),
      ...(typeof state.url === 'string' ? { url: state.url } : {}),
      ...(number(state.pid) === undefined ? {} : { pid: number(state.pid) }),
      ...(number(state.redisPid) === undefined ? {} : { redisPid: number(state.redisPid) }),
    };
  } catch {
    return undefined;
  }
}

/** Writes the state whole (a reader never sees half of it), this user's alone. */
function writeState(config: Config, state: EmbeddedState): void {
  const next = `${stateFile(config)}.${process.pid}`;
  writeFileSync(next, `${JSON.stringify(state)}\n`, { mode: 0o600 });
  renameSync(next, stateFile(config));
}

/** The data folder, this user's alone (0700): it holds the secret key, the Redis password and the data. */
function privateDataDir(config: Config): void {
  mkdirSync(config.dataDir, { recursive: true, mode: 0o700 });
  chmodSync(config.dataDir, 0o700);
}

/** The embedded Redis's password (`<HOOKLINE_DATA_DIR>/redis.password`), or undefined before the first start that makes one. */
function readPassword(config: Config): string | undefined {
  let text: string;
  try {
    text = readFileSync(passwordFile(config), 'utf8').trim();
  } catch {
    return undefined;
  }
  // It goes into a redis.conf line as it is: nothing that line could read otherwise.
  if (!/^[A-Za-z0-9_-]{16,}$/.test(text))
    throw new ConfigError(
      `Invalid configuration:\n  ${passwordFile(config)}: expected 16 or more letters, digits, _ or -`,
    );
  return text;
}

/** The password, made (mode 0600) when the data folder has none yet: a new one, or one from before passwords. */
function ensurePassword(config: Config): string {
  const existing = readPassword(config);
  if (existing !== undefined) return existing;
  try {
    writeFileSync(passwordFile(config), `${randomBytes(32).toString('hex')}\n`, { mode: 0o600, flag: 'wx' });
  } catch (error) {
    // Another process made it first: use theirs.
    if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
  }
  return readPassword(config)!;
}

/** Shuts down a Redis this process did not start (it has no handle of it) and waits for it to exit. */
async function shutDown(url: string, redisPid: number): Promise<void> {
  const connection = new Redis(url, { maxRetriesPerRequest: 0, retryStrategy: () => null });
  connection.on('error', () => undefined);
  // SHUTDOWN answers nothing: the connection just ends.
  await connection.call('SHUTDOWN').catch(() => undefined);
  connection.disconnect();
  for (let waited = 0; waited < 10_000 && alive(redisPid); waited += 50)
    await new Promise((resolve) => setTimeout(resolve, 50));
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
 * shared when another Hookline process runs it, taken over when one left it running (it crashed),
 * else started here (loopback only, a password, files only this user can read, AOF on, data in
 * `<HOOKLINE_DATA_DIR>/redis`, on the port it had last time when that is free), and stopped again
 * by release() when this process runs it.
 */
export async function resolveRedis(
  config: Config,
  say: (line: string) => void,
  options: ResolveRedisOptions,
): Promise<RedisEndpoint> {
  if (config.redisUrl !== undefined)
    return { url: config.redisUrl, origin: 'configured', release: async () => undefined };

  if (!options.createData && !existsSync(redisDir(config))) {
    throw new NoEngineDataError(
      `no Hookline engine data found in ${config.dataDir} (no engine runs there, and none has run there). ` +
        'Point this command at the engine: REDIS_URL=redis://host:port when it uses a Redis of its own, or ' +
        'HOOKLINE_DATA_DIR=<its data folder> when it runs the embedded Redis (its start-up line names the folder as dataDir).',
    );
  }
  privateDataDir(config);
  return withStartLock(config, () => embeddedRedis(config, say));
}

/** The embedded Redis of the data folder (see resolveRedis), found or started while this process holds the folder's start lock. */
async function embeddedRedis(config: Config, say: (line: string) => void): Promise<RedisEndpoint> {
  const existing = readState(config);
  const running = existing && (await ownRedisAt(config, existing, readPassword(config)));
  if (existing && running) {
    if (existing.pid !== undefined && existing.pid !== process.pid && alive(existing.pid)) {
      return {
        url: running.url,
        origin: 'embedded-shared',
        sharedWithPid: existing.pid,
        release: async () => undefined,
      };
    }
    writeState(config, { ...existing, url: redisUrlForLog(running.url), pid: process.pid, redisPid: running.redisPid });
    return {
      url: running.url,
      origin: 'embedded-started',
      release: once(() => stopped(config, existing, shutDown(running.url, running.redisPid))),
    };
  }

  const password = ensurePassword(config);
  const id = existing?.id ?? randomBytes(16).toString('hex');
  const binary = await ensureRedisServerBinary(say);
  const port = config.embeddedRedisPort !== 0 ? config.embeddedRedisPort : (existing?.port ?? 0);
  const start = (on: number) =>
    startRedisServer({ binary, port: on, dir: redisDir(config), appendOnly: true, private: { password } });
  const server = await start(port).catch((error: unknown) => {
    if (!(error instanceof RedisPortTakenError)) throw error;
    if (config.embeddedRedisPort !== 0) {
      throw new EmbeddedRedisError(
        `the embedded Redis of ${config.dataDir} cannot start on port ${port} (HOOKLINE_EMBEDDED_REDIS_PORT): another process holds it; choose another port, or 0 for a free one`,
      );
    }
    // A remembered port taken meanwhile: any free one does.
    return start(0);
  });
  const url = loopbackUrl(server.port, password);
  try {
    const marker = new Redis(url, { maxRetriesPerRequest: 1, retryStrategy: () => null });
    marker.on('error', () => undefined);
    try {
      await marker.set(DATA_DIR_ID_KEY, id);
    } finally {
      marker.disconnect();
    }
  } catch (error) {
    await server.stop();
    throw error;
  }
  const state = { port: server.port, id };
  writeState(config, { ...state, url: server.url, pid: process.pid, redisPid: server.pid });
  return { url, origin: 'embedded-started', release: once(() => stopped(config, state, server.stop())) };
}

/** How long a process waits for another to finish starting the folder's Redis (a start takes 15 s at most). */
const START_LOCK_WAIT_MS = 30_000;

/**
 * Runs `body` holding `<HOOKLINE_DATA_DIR>/redis.lock` (it holds the holder's pid): two processes
 * finding no server at the same moment would otherwise start two redis-servers on one folder's files,
 * which corrupts them. A lock whose holder died is taken over.
 */
async function withStartLock<T>(config: Config, body: () => Promise<T>): Promise<T> {
  const file = path.join(config.dataDir, 'redis.lock');
  const deadline = Date.now() + START_LOCK_WAIT_MS;
  for (;;) {
    try {
      writeFileSync(file, `${process.pid}\n`, { flag: 'wx', mode: 0o600 });
      break;
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== 'EEXIST') throw error;
    }
    let holder: number;
    let writtenAtMs: number;
    try {
      holder = Number.parseInt(readFileSync(file, 'utf8'), 10);
      writtenAtMs = statSync(file).mtimeMs;
    } catch {
      // Released meanwhile.
      continue;
    }
    // An empty file is one being written this moment, unless it has been empty for seconds.
    const stale = Number.isNaN(holder) ? Date.now() - writtenAtMs > 2_000 : !alive(holder);
    if (stale) rmSync(file, { force: true });
    else if (Date.now() > deadline)
      throw new EmbeddedRedisError(
        `${file} is held by process ${holder}, which is starting the embedded Redis; try again once it has`,
      );
    else await new Promise((resolve) => setTimeout(resolve, 100));
  }
  try {
    return await body();
  } finally {
    rmSync(file, { force: true });
  }
}

/** `work` run on the first call only; every call answers its promise. */
function once(work: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  return () => (running ??= work());
}

/** Waits for the server to stop, then leaves the state of a stopped one: its id and port. */
async function stopped(config: Config, state: EmbeddedState, stopping: Promise<void>): Promise<void> {
  await stopping;
  writeState(config, { port: state.port, ...(state.id === undefined ? {} : { id: state.id }) });
}

/**
 * The AES key for webhook secrets: `HOOKLINE_SECRET_KEY` when set; with the embedded default, one
 * generated once and kept in `<HOOKLINE_DATA_DIR>/secret.key` (mode 0600).
 */
export function resolveSecretKey(config: Config): Buffer {
  if (config.secretKey !== undefined) return config.secretKey;
  if (config.redisUrl !== undefined) {
    throw new ConfigError(
      'Invalid configuration:\n  HOOKLINE_SECRET_KEY: required when REDIS_URL is set (32 random bytes in base64: openssl rand -base64 32)',
    );
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
  // One made by an earlier version may be readable by others.
  chmodSync(file, 0o600);
  const key = Buffer.from(readFileSync(file, 'utf8').trim(), 'base64');
  if (key.length !== 32) throw new ConfigError(`Invalid configuration:\n  ${file}: expected 32 bytes in base64`);
  return key;
}
