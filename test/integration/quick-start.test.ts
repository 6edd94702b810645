/**
 * The README's quick start, run as a new user runs it: each `sh` block's commands in order, in one
 * bash session (so `KEY=$(…)` and `WEBHOOK_ID=$(…)` carry over), the engine (`npm start`) and the
 * demo receiver as the background processes a user keeps in other terminals, stopped with the
 * Ctrl-C signal. Only the ports change (free ones instead of 8080 and 9000, so the test runs beside
 * others) and the data folder (a fresh one). What the prose says happens is checked: the receiver
 * verifies the test event, the producer's event reaches it, the failing receiver leaves a dead
 * letter that the replay delivers, and the portal link is printed.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { withBuildLock } from '../helpers/build-lock.js';
import { cleanEnv } from '../helpers/processes.js';
import { waitFor } from '../helpers/wait.js';

const ROOT = path.resolve(import.meta.dirname, '../..');
const readme = readFileSync(path.join(ROOT, 'README.md'), 'utf8');
const quickStart = readme.slice(
  readme.indexOf('## Quick start'),
  readme.indexOf('\n## ', readme.indexOf('## Quick start') + 1),
);
/** The quick start's shell blocks, in order, continuation lines joined and comments dropped. */
const blocks = [...quickStart.matchAll(/```sh\n([\s\S]*?)```/g)].map((m) =>
  (m[1] ?? '')
    .replace(/\\\n\s*/g, ' ')
    .split('\n')
    .map((line) => line.replace(/\s+#\s.*$/, '').trim())
    .filter((line) => line !== '' && !line.startsWith('#')),
);

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      server.close(() => resolve(typeof address === 'object' && address !== null ? address.port : 0));
    });
  });
}

/** A bash session fed one command at a time, its output (stdout and stderr) kept per command. */
class Shell {
  private readonly child: ChildProcess;
  private output = '';
  private count = 0;

  constructor(env: NodeJS.ProcessEnv) {
    this.child = spawn('bash', ['--norc', '--noprofile'], { cwd: ROOT, env, stdio: ['pipe', 'pipe', 'pipe'] });
    this.child.stdout?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
    this.child.stderr?.on('data', (chunk: Buffer) => (this.output += chunk.toString()));
  }

  /** Runs one command line; answers its output and exit status. */
  async run(line: string, timeoutMs = 60_000): Promise<{ status: number; output: string }> {
    const marker = `__quick_start_${++this.count}__`;
    const from = this.output.length;
    this.child.stdin?.write(`${line}\necho; echo "${marker} $?"\n`);
    const done = await waitFor(
      () => new RegExp(`${marker} (\\d+)`).exec(this.output.slice(from)),
      timeoutMs,
      `\`${line}\``,
      50,
    );
    const output = this.output.slice(from, from + done.index).trimEnd();
    return { status: Number(done[1]), output };
  }

  close(): void {
    this.child.stdin?.end();
    this.child.kill('SIGKILL');
  }
}

/** A long-running command of the quick start (the engine, the receiver), in a process group of its own as in a terminal. */
class Service {
  private child: ChildProcess | undefined;
  log = '';

  start(line: string, env: NodeJS.ProcessEnv): void {
    this.log = '';
    this.child = spawn('bash', ['-c', line], { cwd: ROOT, env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
    this.child.stdout?.on('data', (chunk: Buffer) => (this.log += chunk.toString()));
    this.child.stderr?.on('data', (chunk: Buffer) => (this.log += chunk.toString()));
  }

  /**
   * Ctrl-C: SIGINT to the whole process group, then waits until every process of the group is gone
   * (npm, the shell it runs and Hookline itself), as a user waits for the prompt before starting
   * the next command.
   */
  async stop(): Promise<void> {
    const child = this.child;
    if (child?.pid === undefined) return;
    const group = -child.pid;
    const alive = () => {
      try {
        process.kill(group, 0);
        return true;
      } catch {
        return false;
      }
    };
    if (!alive()) return;
    process.kill(group, 'SIGINT');
    const stopped = await waitFor(() => !alive(), 30_000, `${line(child)} to stop on Ctrl-C`, 50).catch(() => false);
    if (!stopped) process.kill(group, 'SIGKILL');
    expect(stopped, `${line(child)} stops on Ctrl-C; its output: ${this.log.slice(-2000)}`).toBe(true);
  }
}

const line = (child: ChildProcess): string => child.spawnargs.join(' ');

describe('the README quick start', () => {
  const dataDir = mkdtempSync(path.join(tmpdir(), 'hookline-quick-start-'));
  const engine = new Service();
  const receiver = new Service();
  let shell: Shell | undefined;

  afterAll(async () => {
    await engine.stop().catch(() => undefined);
    await receiver.stop().catch(() => undefined);
    shell?.close();
    rmSync(dataDir, { recursive: true, force: true });
  });

  it('runs as written: a verified test event, a producer’s event, a dead letter replayed, a portal link', async () => {
    const apiPort = await freePort();
    const receiverPort = await freePort();
    const env = {
      ...cleanEnv(),
      HOOKLINE_DATA_DIR: dataDir,
      HOOKLINE_API_PORT: String(apiPort),
      PORT: String(receiverPort),
    };
    const ours = (text: string) =>
      text
        .replaceAll('127.0.0.1:8080', `127.0.0.1:${apiPort}`)
        .replaceAll('127.0.0.1:9000', `127.0.0.1:${receiverPort}`);
    shell = new Shell(env);
    const verified = () => [...receiver.log.matchAll(/verified=yes .*status=204/g)].length;
    const outputs: string[] = [];
    let receiverLine = '';

    await withBuildLock(async () => {
      for (const block of blocks) {
        // A block that replays dead letters comes after the prose's "restart the receiver without
        // FAIL_RATE": the dead letter must exist first (three attempts, 2 and 4 s apart).
        if (block.some((command) => command.includes('dlq replay'))) {
          await waitFor(
            async () =>
              (await shell?.run('node dist/cli.js dlq list --webhook $WEBHOOK_ID --json'))?.output.includes(
                '"delivery_id"',
              ),
            60_000,
            'a dead letter',
            500,
          );
          await receiver.stop();
          receiverLine = receiverLine.replace(/\bFAIL_RATE=\S+\s+/, '');
          receiver.start(receiverLine, env);
          await waitFor(() => receiver.log.includes('listening'), 10_000, 'the receiver');
        }
        for (const command of block.map(ours)) {
          if (command === 'npm test') continue; // this is the test
          if (/\bnpm start$/.test(command)) {
            await engine.stop();
            engine.start(command.replace(/^npm ci && /, ''), env);
            await waitFor(
              async () => (await fetch(`http://127.0.0.1:${apiPort}/readyz`).catch(() => undefined))?.status === 200,
              120_000,
              `the engine (${engine.log.slice(-500)})`,
              200,
            );
          } else if (command.includes('examples/demo-receiver/receiver.mjs')) {
            await receiver.stop();
            receiverLine = command;
            receiver.start(command, env);
            await waitFor(() => receiver.log.includes('listening'), 10_000, 'the receiver');
          } else {
            const before = verified();
            const result = await shell!.run(command);
            outputs.push(`$ ${command}\n${result.output}`);
            console.log(`$ ${command}\n${result.output}`);
            expect(result.status, `${command}\n${result.output}`).toBe(0);
            // A test event, a producer's event or a replay towards a receiver that answers: it arrives, verified.
            if (/\/test |\/internal\/v1\/events|dlq replay/.test(command) && !receiverLine.includes('FAIL_RATE=')) {
              await waitFor(() => verified() > before, 20_000, `a verified delivery after \`${command}\``).catch(
                (error: Error) => {
                  throw new Error(`${error.message}\nreceiver: ${receiver.log}\nengine: ${engine.log.slice(-4000)}`);
                },
              );
            }
          }
        }
      }
    });

    const transcript = outputs.join('\n');
    expect(transcript).toMatch(/"webhook_id":"[0-9a-f-]{36}"/);
    expect(receiver.log).toMatch(/type=EVENT_TYPE_MACHINE_CREATED attempt=1 verified=yes/);
    expect(transcript).toMatch(/"status":"delivered"/);
    expect(transcript).toMatch(new RegExp(`http://127\\.0\\.0\\.1:${apiPort}/portal/#token=\\S+`));
  }, 300_000);
});
