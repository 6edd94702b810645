import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { freeLoopbackPort } from '../../src/embedded/redis-server.js';
import { settles } from './wait.js';

/** A tinyproxy running in the foreground on 127.0.0.1, for the egress proxy's tests. */
export interface TestTinyproxy {
  /** `http://127.0.0.1:<port>`, without credentials. */
  url: string;
  /** The proxy's log so far: one `Request (file descriptor N): CONNECT <target> HTTP/1.1` line per CONNECT. */
  log(): string;
  stop(): Promise<void>;
}

/** Whether the `tinyproxy` command is there (Debian: apt-get install tinyproxy). */
export function hasTinyproxy(): boolean {
  try {
    execFileSync('tinyproxy', ['-v'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

/** tinyproxy's config grammar takes BasicAuth names and passwords of these characters only. */
const BASIC_AUTH_WORD = /^[-\w.]+$/;

/** Logged once tinyproxy listens: waiting for it needs no probe connection, which would show in the log. */
const LISTENING = 'Accepting connections.';

/**
 * Starts tinyproxy (`tinyproxy -d -c <conf>`) on a free loopback port, answering 127.0.0.1 only. With
 * no ConnectPort line it tunnels CONNECT to any port; with `basicAuth` it wants those credentials.
 * A port taken between choosing and binding (tinyproxy then exits) is chosen again, twice at most.
 */
export async function startTinyproxy(
  options: { basicAuth?: { user: string; password: string } } = {},
): Promise<TestTinyproxy> {
  const { basicAuth } = options;
  if (basicAuth && !(BASIC_AUTH_WORD.test(basicAuth.user) && BASIC_AUTH_WORD.test(basicAuth.password))) {
    throw new Error('tinyproxy BasicAuth takes letters, digits, "-", "_" and "." only');
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-tinyproxy-'));
  let lastError = '';
  for (let attempt = 1; attempt <= 3; attempt++) {
    const port = await freeLoopbackPort();
    const logPath = path.join(dir, `tinyproxy-${attempt}.log`);
    const configPath = path.join(dir, `tinyproxy-${attempt}.conf`);
    writeFileSync(configPath, config(port, logPath, basicAuth));
    const child = spawn('tinyproxy', ['-d', '-c', configPath], { stdio: ['ignore', 'ignore', 'pipe'] });
    let stderr = '';
    let failed = false;
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString('utf8')));
    child.on('error', (error) => {
      failed = true;
      stderr += error.message;
    });
    const log = () => (existsSync(logPath) ? readFileSync(logPath, 'utf8') : '');
    const up = await settles(() => failed || child.exitCode !== null || log().includes(LISTENING), 5_000);
    if (up && !failed && child.exitCode === null) {
      return {
        url: `http://127.0.0.1:${port}`,
        log,
        stop: async () => {
          await stopChild(child);
          rmSync(dir, { recursive: true, force: true });
        },
      };
    }
    await stopChild(child);
    lastError = `tinyproxy did not start on port ${port}: ${stderr.trim() || 'not listening after 5 s'}\n${log()}`;
  }
  rmSync(dir, { recursive: true, force: true });
  throw new Error(lastError);
}

function config(port: number, logPath: string, basicAuth: { user: string; password: string } | undefined): string {
  return [
    `Port ${port}`,
    'Listen 127.0.0.1',
    'Timeout 30',
    'Allow 127.0.0.1',
    'MaxClients 100',
    // Info logs "Accepting connections." once listening, besides every client and CONNECT.
    'LogLevel Info',
    // A path must be quoted in tinyproxy's grammar.
    `LogFile "${logPath}"`,
    ...(basicAuth ? [`BasicAuth ${basicAuth.user} ${basicAuth.password}`] : []),
    '',
  ].join('\n');
}

/** SIGTERM (tinyproxy takes up to ~2 s to leave its main loop), then SIGKILL after 5 s. */
async function stopChild(child: ChildProcess): Promise<void> {
  if (child.pid === undefined || child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const timer = setTimeout(() => child.kill('SIGKILL'), 5_000);
  await exited;
  clearTimeout(timer);
}
