import { execFile } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { waitFor } from './wait.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * Runs `work` while no other test builds this checkout: `npm start` builds what changed, and two
 * builds writing dist/ at once can leave it half-written. The lock is a folder (mkdir is atomic),
 * per checkout, given back when `work` ends however it ends.
 */
export async function withBuildLock<T>(work: () => Promise<T>): Promise<T> {
  const lock = path.join(tmpdir(), `hookline-build-${Buffer.from(ROOT).toString('base64url')}.lock`);
  await waitFor(
    () => {
      try {
        mkdirSync(lock);
        writeFileSync(path.join(lock, 'pid'), String(process.pid));
        return true;
      } catch {
        releaseIfHolderDied(lock);
        return false;
      }
    },
    300_000,
    'the build lock',
    200,
  );
  try {
    return await work();
  } finally {
    rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * Removes the lock if the process that took it has ended without giving it back (killed mid-build,
 * an interrupted run): its pid file names a process that no longer exists. A lock just made, whose
 * pid file is not written yet, is left alone.
 */
function releaseIfHolderDied(lock: string): void {
  let pid: number;
  try {
    pid = Number(readFileSync(path.join(lock, 'pid'), 'utf8'));
  } catch {
    return;
  }
  if (!Number.isInteger(pid) || pid <= 0) return;
  try {
    process.kill(pid, 0);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === 'ESRCH') rmSync(lock, { recursive: true, force: true });
  }
}

/**
 * Builds the checkout as `npm start` does before it starts the engine (its script up to
 * `node dist/cli.js start`), as npm runs a script: in the checkout, with its binaries on PATH. The
 * build is incremental; call it holding the build lock.
 */
export async function buildAsNpmStart(): Promise<void> {
  const script = (JSON.parse(readFileSync(path.join(ROOT, 'package.json'), 'utf8')) as { scripts: { start: string } })
    .scripts.start;
  const build = script.replace(/\s*&&\s*node dist\/cli\.js start$/, '');
  if (build === script) throw new Error(`npm start no longer ends by running the built CLI: ${script}`);
  await promisify(execFile)('sh', ['-c', build], {
    cwd: ROOT,
    env: { ...process.env, PATH: `${path.join(ROOT, 'node_modules/.bin')}${path.delimiter}${process.env.PATH ?? ''}` },
  });
}
