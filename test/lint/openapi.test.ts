import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { servedDocument } from '../helpers/openapi.js';

const ROOT = path.resolve(import.meta.dirname, '../..');

interface Run {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** The linters' entry points, run with the Node that runs the tests. */
const require = createRequire(import.meta.url);
const CLIS = {
  redocly: require.resolve('@redocly/cli/bin/cli.js'),
  spectral: require.resolve('@stoplight/spectral-cli/dist/index.js'),
};

/** Runs a linter from the repository root; answers however it exits. */
function run(cli: keyof typeof CLIS, args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [CLIS[cli], ...args],
      // No update notices, no telemetry, no colour: only the report on stdout.
      {
        cwd: ROOT,
        env: { ...process.env, REDOCLY_TELEMETRY: 'off', REDOCLY_SUPPRESS_UPDATE_NOTICE: 'true', NO_COLOR: '1' },
        maxBuffer: 64 * 1024 * 1024,
      },
      (error, stdout, stderr) =>
        resolve({ code: error ? (typeof error.code === 'number' ? error.code : 1) : 0, stdout, stderr }),
    );
  });
}

/** The JSON report on stdout, or an error that shows what the CLI said instead. */
function report<T>(cli: string, result: Run): T {
  try {
    return JSON.parse(result.stdout) as T;
  } catch {
    throw new Error(`${cli} exited ${result.code} without a JSON report:\n${result.stdout}\n${result.stderr}`);
  }
}

/** Redocly's findings on one file, one readable line each. */
async function redocly(file: string): Promise<string[]> {
  const result = await run('redocly', [
    'lint',
    file,
    '--config',
    path.join(ROOT, 'redocly.yaml'),
    '--format=json',
    '--max-problems=1000',
  ]);
  const { problems } = report<{
    problems: { ruleId: string; severity: string; message: string; location: { pointer: string }[] }[];
  }>('redocly', result);
  return problems.map((p) => `${p.severity} ${p.ruleId} at ${p.location[0]?.pointer}: ${p.message}`);
}

/** Spectral's findings on one file, one readable line each (hints and infos included). */
async function spectral(file: string): Promise<string[]> {
  const result = await run('spectral', [
    'lint',
    file,
    '--ruleset',
    path.join(ROOT, '.spectral.yaml'),
    '--format=json',
    '--fail-severity=hint',
  ]);
  // A clean run appends a sentence to its `[]`.
  const json = {
    ...result,
    stdout: result.stdout.replace(/No results with a severity of '\w+' or higher found!\s*$/, ''),
  };
  const results = report<{ code: string; path: string[]; message: string }[]>('spectral', json);
  return results.map((r) => `${r.code} at ${r.path.join('.')}: ${r.message}`);
}

describe('the served OpenAPI document passes Redocly and Spectral with no error or warning', () => {
  let t: TestApp;
  let dir: string;
  let served: string;
  /** A copy with known defects: proves each linter really reads the file and reports. */
  let broken: string;

  beforeAll(async () => {
    t = await testApp();
    const doc = await servedDocument(t.app);
    dir = mkdtempSync(path.join(tmpdir(), 'hookline-openapi-'));
    served = path.join(dir, 'openapi.json');
    broken = path.join(dir, 'broken.json');
    writeFileSync(served, JSON.stringify(doc, null, 2));
    const defective = structuredClone(doc);
    delete defective.servers;
    delete defective.paths['/rental/v1/tasks/{task_id}']!.get!.operationId;
    writeFileSync(broken, JSON.stringify(defective, null, 2));
  });
  afterAll(async () => {
    await t.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('Redocly CLI (recommended ruleset, redocly.yaml)', async () => {
    const [found, foundInBroken] = await Promise.all([redocly(served), redocly(broken)]);
    expect(found).toEqual([]);
    expect(foundInBroken.join('\n')).toMatch(
      /operation-operationId at #\/paths\/~1rental~1v1~1tasks~1\{task_id\}\/get/,
    );
    expect(foundInBroken.join('\n')).toContain('no-empty-servers');
  });

  it('Spectral (spectral:oas ruleset, .spectral.yaml)', async () => {
    const [found, foundInBroken] = await Promise.all([spectral(served), spectral(broken)]);
    expect(found).toEqual([]);
    expect(foundInBroken.join('\n')).toContain('operation-operationId at paths./rental/v1/tasks/{task_id}.get');
    expect(foundInBroken.join('\n')).toContain('oas3-api-servers');
  });
});
