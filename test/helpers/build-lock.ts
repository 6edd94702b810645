import { mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
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
