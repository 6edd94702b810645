import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';

declare module 'vitest' {
  export interface ProvidedContext {
    /** The vendor portal's browser app, built for this run (`web/portal/build.mjs` into a folder of its own). */
    portalDir: string;
  }
}

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * Builds the portal's assets once per run into a temporary folder, so the tests serve what the
 * sources say now (on a clean clone too) and never race `npm run build` over dist/.
 */
export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-portal-'));
  execFileSync(process.execPath, [path.join(ROOT, 'web/portal/build.mjs'), dir], {
    cwd: ROOT,
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  project.provide('portalDir', dir);
  return () => rmSync(dir, { recursive: true, force: true });
}
