import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { access, constants } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import { Redis } from 'ioredis';

/** A redis-server process started by Hookline (the embedded default, tests and benchmarks). */
export interface RedisServerHandle {
  readonly url: string;
  readonly port: number;
  /** Shuts the server down (it flushes its AOF first) and waits for the process to exit. */
  stop(): Promise<void>;
  /** Kills the server with SIGKILL, as a crash would (fault-injection tests); waits for the exit. */
  kill(): Promise<void>;
}

export interface StartRedisServerOptions {
  binary: string;
  /** 0 picks a free loopback port. */
  port: number;
  /** Working directory for AOF files and the log; created when missing. */
  dir: string;
  /** AOF persistence; off for throwaway test servers. */
  appendOnly: boolean;
  /** Extra `redis-server` arguments, e.g. `['--appendfsync', 'always']`. */
  extraArgs?: readonly string[];
  startTimeoutMs?: number;
}

export class RedisServerUnavailableError extends Error {
  override name = 'RedisServerUnavailableError';
}

const SEARCH_DIRS = ['/usr/bin', '/usr/local/bin', '/usr/sbin', '/opt/homebrew/bin', '/snap/bin'];

/** Finds a `redis-server` executable (or another of Redis's, such as `redis-cli`) on PATH or in the usual install folders. */
export async function findRedisServerBinary(
  envPath = process.env.PATH ?? '',
  extraDirs: readonly string[] = SEARCH_DIRS,
  name: 'redis-server' | 'redis-cli' = 'redis-server',
): Promise<string | undefined> {
  const dirs = [...envPath.split(path.delimiter).filter(Boolean), ...extraDirs];
  for (const dir of dirs) {
    const candidate = path.join(dir, name);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not in this folder
    }
  }
  return undefined;
}

const WAYS_FORWARD = [
  'Hookline needs Redis 7 or newer. Any one of these works:',
  '  - install Redis so that `redis-server` is on PATH (Debian/Ubuntu: apt-get install redis-server;',
  '    macOS: brew install redis), and Hookline starts a local one by itself;',
  '  - set REDIS_URL=redis://host:port to use a Redis you already run;',
  '  - run the whole stack with Docker: docker compose up.',
].join('\n');

function isDebianRoot(): boolean {
  return process.platform === 'linux' && existsSync('/etc/debian_version') && process.getuid?.() === 0;
}

/**
 * Returns a `redis-server` binary, installing Debian's package with apt-get when this is Debian or
 * Ubuntu and we are root; otherwise throws RedisServerUnavailableError listing the ways forward.
 */
export async function ensureRedisServerBinary(
  say: (line: string) => void,
  host: { find?: () => Promise<string | undefined>; canInstall?: boolean } = {},
): Promise<string> {
  const find = host.find ?? (() => findRedisServerBinary());
  const found = await find();
  if (found) return found;
  if (!(host.canInstall ?? isDebianRoot())) throw new RedisServerUnavailableError(`redis-server was not found.\n${WAYS_FORWARD}`);
  say("redis-server was not found; installing Debian's redis-server package with apt-get (running as root)…");
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update'], ['install', '-y', '--no-install-recommends', 'redis-server']]) {
    // stdout goes to stderr so that commands printing a result (keys create) keep stdout clean.
    const result = spawnSync('apt-get', args, { env, stdio: ['ignore', 2, 2] });
    if (result.status !== 0) {
      throw new RedisServerUnavailableError(`apt-get ${args.join(' ')} failed (exit ${result.status ?? 'signal'}).\n${WAYS_FORWARD}`);
    }
  }
  const installed = await find();
  if (!installed) throw new RedisServerUnavailableError(`redis-server is still missing after apt-get.\n${WAYS_FORWARD}`);
  return installed;
}

/** Asks the kernel for a free TCP port on 127.0.0.1. */
export async function freeLoopbackPort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))));
    });
  });
}

async function waitForPing(port: number, child: ChildProcess, deadline: number): Promise<void> {
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error('redis-server exited during start-up');
    const probe = new Redis({ host: '127.0.0.1', port, lazyConnect: true, maxRetriesPerRequest: 0, retryStrategy: () => null });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      if ((await probe.ping()) === 'PONG') return;
    } catch {
      // not listening yet
    } finally {
      probe.disconnect();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('redis-server did not answer PING in time');
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-15).join('\n');
  } catch {
    return '(no log)';
  }
}

/** Starts `redis-server` bound to loopback only and resolves once it answers PING. */
export async function startRedisServer(options: StartRedisServerOptions): Promise<RedisServerHandle> {
  mkdirSync(options.dir, { recursive: true });
  const logFile = path.join(path.resolve(options.dir), 'redis.log');
  const attempts = options.port === 0 ? 3 : 1;
  let lastError: unknown;
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    const port = options.port === 0 ? await freeLoopbackPort() : options.port;
    const args = [
      '--port',
      String(port),
      // `-::1` binds IPv6 loopback when the host has it and is skipped otherwise.
      '--bind',
      '127.0.0.1',
      '-::1',
      '--protected-mode',
      'yes',
      '--dir',
      path.resolve(options.dir),
      '--logfile',
      logFile,
      '--daemonize',
      'no',
      '--save',
      '',
      '--appendonly',
      options.appendOnly ? 'yes' : 'no',
      '--maxmemory-policy',
      'noeviction',
      ...(options.extraArgs ?? []),
    ];
    const child = spawn(options.binary, args, { stdio: 'ignore' });
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      await waitForPing(port, child, Date.now() + (options.startTimeoutMs ?? 15_000));
      return {
        url: `redis://127.0.0.1:${port}`,
        port,
        async stop() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGTERM');
          const killTimer = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(killTimer);
        },
        async kill() {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.kill('SIGKILL');
          await exited;
        },
      };
    } catch (error) {
      child.kill('SIGKILL');
      await exited;
      lastError = new Error(`${(error as Error).message} on port ${port}; last lines of ${logFile}:\n${tail(logFile)}`);
    }
  }
  throw lastError;
}
