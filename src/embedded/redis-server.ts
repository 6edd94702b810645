import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { access, constants } from 'node:fs/promises';
import { createServer } from 'node:net';
import path from 'node:path';
import { Redis } from 'ioredis';

/** A redis-server process started by Hookline (the embedded default, tests and benchmarks). */
export interface RedisServerHandle {
  readonly url: string;
  readonly port: number;
  /** The redis-server process. */
  readonly pid: number;
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
  /**
   * A Redis only this operating-system user can use (the embedded default): it requires `password`,
   * which reaches it in a config file of mode 0600 in `dir` (never on the command line, where `ps`
   * shows it to every user), and `dir` and every file in it are this user's alone (0700, 0600).
   */
  private?: { password: string };
}

export class RedisServerUnavailableError extends Error {
  override name = 'RedisServerUnavailableError';
}

/** The port asked for is held by another process (possibly another Redis). */
export class RedisPortTakenError extends Error {
  override name = 'RedisPortTakenError';
  constructor(readonly port: number) {
    super(`port ${port} is in use by another process`);
  }
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
  if (!(host.canInstall ?? isDebianRoot()))
    throw new RedisServerUnavailableError(`redis-server was not found.\n${WAYS_FORWARD}`);
  say("redis-server was not found; installing Debian's redis-server package with apt-get (running as root)…");
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
  for (const args of [['update'], ['install', '-y', '--no-install-recommends', 'redis-server']]) {
    // stdout goes to stderr so that commands printing a result (keys create) keep stdout clean.
    const result = spawnSync('apt-get', args, { env, stdio: ['ignore', 2, 2] });
    if (result.status !== 0) {
      throw new RedisServerUnavailableError(
        `apt-get ${args.join(' ')} failed (exit ${result.status ?? 'signal'}).\n${WAYS_FORWARD}`,
      );
    }
  }
  const installed = await find();
  if (!installed)
    throw new RedisServerUnavailableError(`redis-server is still missing after apt-get.\n${WAYS_FORWARD}`);
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
      server.close(() =>
        typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port')),
      );
    });
  });
}

/** Whether nothing listens on 127.0.0.1:`port` (the embedded Redis's address). */
async function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

/**
 * Resolves once the redis-server `child` answers on `port`. Whatever else answers there does not
 * count: another Redis on a port ours could not bind answers PING too, and taking it for ours would
 * show (and change) another installation's data. So the answer must come from the child's process id.
 */
async function waitForOwnServer(
  port: number,
  child: ChildProcess,
  deadline: number,
  password: string | undefined,
): Promise<void> {
  while (Date.now() < deadline) {
    if (child.exitCode !== null || child.signalCode !== null) throw new Error('redis-server exited during start-up');
    // No ready check: it runs before AUTH, which a server with a password refuses it.
    const probe = new Redis({
      host: '127.0.0.1',
      port,
      lazyConnect: true,
      enableReadyCheck: false,
      maxRetriesPerRequest: 0,
      retryStrategy: () => null,
    });
    probe.on('error', () => undefined);
    try {
      await probe.connect();
      // AUTH sent by hand: given as an option, ioredis prints a warning when a server without a password answers.
      if (password !== undefined) await probe.call('AUTH', password);
      const info = await probe.info('server');
      if (Number(/^process_id:(\d+)/m.exec(info)?.[1]) === child.pid) return;
    } catch {
      // not listening yet, or not ours
    } finally {
      probe.disconnect();
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error('redis-server did not answer in time');
}

/** Makes `dir` and every file in it (and in its subfolders, such as appendonlydir/) this user's alone. */
function restrictToUser(dir: string): void {
  chmodSync(dir, 0o700);
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const file = path.join(dir, entry.name);
    if (entry.isDirectory()) restrictToUser(file);
    else if (entry.isFile()) chmodSync(file, 0o600);
  }
}

/**
 * Starts `binary` with `args`; a private server's files are created under umask 077. Its own
 * process group: a Ctrl-C in the terminal reaches only Hookline, which stops Redis after the engine
 * has finished with it (Redis gone first would leave the drain nothing to record into); and should
 * this process exit without stopping it, it is asked to shut down.
 */
function spawnServer(binary: string, args: string[], restricted: boolean): ChildProcess {
  const umask = restricted ? process.umask(0o077) : undefined;
  let child: ChildProcess;
  try {
    child = spawn(binary, args, { stdio: 'ignore', detached: true });
  } finally {
    if (umask !== undefined) process.umask(umask);
  }
  const stopOnExit = () => child.kill('SIGTERM');
  process.on('exit', stopOnExit);
  child.once('exit', () => process.off('exit', stopOnExit));
  return child;
}

function tail(file: string): string {
  try {
    return readFileSync(file, 'utf8').split('\n').slice(-15).join('\n');
  } catch {
    return '(no log)';
  }
}

/**
 * Starts `redis-server` bound to loopback only and resolves once it answers (it, not another server
 * on the same port). A port asked for that something else holds is a RedisPortTakenError.
 */
export async function startRedisServer(options: StartRedisServerOptions): Promise<RedisServerHandle> {
  const dir = path.resolve(options.dir);
  mkdirSync(dir, { recursive: true });
  const logFile = path.join(dir, 'redis.log');
  const password = options.private?.password;
  const config: string[] = [];
  if (password !== undefined) {
    restrictToUser(dir);
    const configFile = path.join(dir, 'redis.conf');
    writeFileSync(configFile, `requirepass ${password}\n`, { mode: 0o600 });
    // The config file is the first argument redis-server takes.
    config.push(configFile);
  }
  const attempts = options.port === 0 ? 3 : 1;
  let lastError: unknown;
  for (let attempt = 0; attempt < attempts; attempt += 1) {
    const port = options.port === 0 ? await freeLoopbackPort() : options.port;
    if (options.port !== 0 && !(await portFree(port))) throw new RedisPortTakenError(port);
    const args = [
      ...config,
      '--port',
      String(port),
      // `-::1` binds IPv6 loopback when the host has it and is skipped otherwise.
      '--bind',
      '127.0.0.1',
      '-::1',
      '--protected-mode',
      'yes',
      '--dir',
      dir,
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
    const child = spawnServer(options.binary, args, password !== undefined);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    try {
      await waitForOwnServer(port, child, Date.now() + (options.startTimeoutMs ?? 15_000), password);
      return {
        url: `redis://127.0.0.1:${port}`,
        port,
        pid: child.pid!,
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
      const log = tail(logFile);
      // Taken between the check and the bind.
      if (options.port !== 0 && /Address already in use/.test(log)) throw new RedisPortTakenError(port);
      lastError = new Error(`${(error as Error).message} on port ${port}; last lines of ${logFile}:\n${log}`);
    }
  }
  throw lastError;
}
