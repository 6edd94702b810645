import { spawn, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

const REPO_ROOT = path.resolve(import.meta.dirname, '../..');
/** Node's arguments that run a TypeScript file from source (tsx resolved here, so it works from any folder). */
export const RUN_TS = ['--import', pathToFileURL(createRequire(import.meta.url).resolve('tsx')).href];
const CLI = [...RUN_TS, path.join(REPO_ROOT, 'src/cli.ts')];

export interface CliResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

export interface CliOptions {
  /** The working folder; default the repository's root. */
  cwd?: string;
}

/**
 * The CLI processes still running. When a test is abandoned at its timeout, its own cleanup never
 * runs; the test process kills what it started as it exits, so no CLI outlives the suite (and the
 * servers it was talking to).
 */
const running = new Set<ChildProcess>();
process.once('exit', () => {
  for (const child of running) child.kill('SIGKILL');
});

/** Starts `hookline <args>` from source with piped stdout and stderr, and leaves the rest to the caller. */
export function spawnCli(args: string[], env: NodeJS.ProcessEnv, options: CliOptions = {}): ChildProcess {
  const child = spawn(process.execPath, [...CLI, ...args], {
    cwd: options.cwd ?? REPO_ROOT,
    // The repository's tsconfig whatever the working folder: tsx reads the one of the folder it
    // starts in, and only this one maps the client packages (@hookline/*) to their sources, so the
    // CLI runs from source on a clean clone, before anything is built.
    env: { ...env, TSX_TSCONFIG_PATH: path.join(REPO_ROOT, 'tsconfig.json') },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  running.add(child);
  child.once('exit', () => running.delete(child));
  return child;
}

/** Runs `hookline <args>` from source to completion (bounded by `timeoutMs`). */
export function runCli(
  args: string[],
  env: NodeJS.ProcessEnv,
  timeoutMs = 30_000,
  options: CliOptions = {},
): Promise<CliResult> {
  return new Promise((resolve, reject) => {
    const child = spawnCli(args, env, options);
    let stdout = '';
    let stderr = '';
    child.stdout?.on('data', (chunk: Buffer) => (stdout += chunk.toString()));
    child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`hookline ${args.join(' ')} timed out; stderr: ${stderr}`));
    }, timeoutMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

/** Starts a long-running `hookline <args>` and resolves once its output (stdout or stderr) matches `ready`. */
export function startCli(
  args: string[],
  env: NodeJS.ProcessEnv,
  ready: RegExp,
  timeoutMs = 60_000,
  options: CliOptions = {},
): Promise<{ child: ChildProcess; output: () => string; exited: Promise<number | null> }> {
  return new Promise((resolve, reject) => {
    const child = spawnCli(args, env, options);
    let output = '';
    const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`hookline ${args.join(' ')} did not become ready; output: ${output}`));
    }, timeoutMs);
    const onData = (chunk: Buffer) => {
      output += chunk.toString();
      if (ready.test(output)) {
        clearTimeout(timer);
        resolve({ child, output: () => output, exited });
      }
    };
    // Either stream may say it is ready (a server logs to stdout; an interactive command to stderr).
    child.stdout?.on('data', onData);
    child.stderr?.on('data', onData);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`hookline ${args.join(' ')} exited with ${code} before it was ready; output: ${output}`));
    });
  });
}
