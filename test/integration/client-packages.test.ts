/**
 * The client packages as their users get them: `npm pack`, installed offline into a project of its
 * own, type-checked under each `moduleResolution` a TypeScript project may use, and run against a
 * real engine: the producer's events accepted, the engine's signed deliveries verified.
 */
import { execFile } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { WEBHOOK_EVENT_TYPES } from '../../src/domain/events.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { withBuildLock } from '../helpers/build-lock.js';
import { cleanEnv } from '../helpers/processes.js';
import { TestReceiver, type ReceivedRequest } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const run = promisify(execFile);
const ROOT = path.resolve(import.meta.dirname, '../..');
const PACKAGES = ['verify', 'producer'] as const;
const VENDOR = 'vendor-clients';
const SECRET = `whsec_${Buffer.from('client packages test secret 32b!').toString('base64')}`;

/**
 * Each `moduleResolution` with the module kind and package type a project using it has. The
 * packages' declaration files are checked in full once, under `node` (where their types used to
 * fail), since checking them means checking all of @types/node, which takes seconds. Elsewhere a
 * declaration that did not resolve would make the consumer's types `any`, and its exhaustive
 * `switch` on the event type would then stop compiling.
 */
const MODES = {
  node: {
    compilerOptions: { module: 'commonjs', moduleResolution: 'node', ignoreDeprecations: '6.0', skipLibCheck: false },
    type: 'commonjs',
  },
  node16: { compilerOptions: { module: 'node16', moduleResolution: 'node16', skipLibCheck: true }, type: 'module' },
  bundler: { compilerOptions: { module: 'esnext', moduleResolution: 'bundler', skipLibCheck: true }, type: 'module' },
} as const;
type Mode = keyof typeof MODES;

interface Packed {
  filename: string;
  files: { path: string }[];
}

/** The environment of a child npm: none of the npm settings of the `npm test` that may have started us. */
function npmEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([name]) => !name.toLowerCase().startsWith('npm_')));
}

/** `npm pack` of a workspace package (its prepack script builds it first) into `destination`. */
async function pack(name: (typeof PACKAGES)[number], destination: string): Promise<Packed> {
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', destination], {
    cwd: path.join(ROOT, 'packages', name),
    env: npmEnv(),
  });
  const [packed] = JSON.parse(stdout) as Packed[];
  if (packed === undefined) throw new Error(`npm pack of ${name} reported nothing`);
  return packed;
}

/** The consumer under `mode`'s settings in `<scratch>/<mode>`; answers tsc's output ('' when it compiled). */
async function compile(scratch: string, mode: Mode): Promise<string> {
  const dir = path.join(scratch, mode);
  mkdirSync(dir);
  copyFileSync(path.join(ROOT, 'test/fixtures/client-consumer.ts'), path.join(dir, 'consumer.ts'));
  writeFileSync(path.join(dir, 'package.json'), JSON.stringify({ type: MODES[mode].type }));
  const compilerOptions = {
    ...MODES[mode].compilerOptions,
    target: 'es2022',
    strict: true,
    outDir: 'out',
    types: ['node'],
    typeRoots: [path.join(ROOT, 'node_modules/@types')],
  };
  writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ compilerOptions, files: ['consumer.ts'] }));
  try {
    await run(process.execPath, [path.join(ROOT, 'node_modules/typescript/bin/tsc'), '-p', dir]);
    return '';
  } catch (error) {
    return String((error as { stdout?: string }).stdout || error);
  }
}

describe('the client packages, packed and installed in a project of their own', () => {
  let scratch: string;
  const packed = new Map<string, Packed>();
  const compiled = new Map<Mode, string>();
  let t: TestApp;
  let worker: TestWorker;
  let receiver: TestReceiver;
  let engineUrl: string;
  let eventsKey: string;
  /** The webhook-id of the test event the vendor asked for. */
  let testEventId: string;

  beforeAll(async () => {
    scratch = mkdtempSync(path.join(tmpdir(), 'hookline-clients-'));
    const project = async () => {
      // Packing builds each package into its dist/ (deleted first): not while another test builds the
      // checkout, whose build reads those folders (`npm start` builds the packages, then the engine
      // against their declarations).
      for (const [name, result] of await withBuildLock(() =>
        Promise.all(PACKAGES.map(async (name) => [name, await pack(name, scratch)] as const)),
      ))
        packed.set(name, result);
      writeFileSync(
        path.join(scratch, 'package.json'),
        JSON.stringify({ name: 'client-packages-consumer', private: true }),
      );
      const tarballs = [...packed.values()].map((p) => path.join(scratch, p.filename));
      await run('npm', ['install', '--offline', '--no-audit', '--no-fund', ...tarballs], {
        cwd: scratch,
        env: npmEnv(),
      });
      for (const [mode, output] of await Promise.all(
        (Object.keys(MODES) as Mode[]).map(async (mode) => [mode, await compile(scratch, mode)] as const),
      )) {
        compiled.set(mode, output);
      }
    };
    const engine = async () => {
      t = await testApp();
      engineUrl = await t.app.listen({ host: '127.0.0.1', port: 0 });
      receiver = new TestReceiver();
      await receiver.start();
      worker = await startTestWorker(t);
      eventsKey = await t.keyFor(['events:write']);
      const webhookIds: string[] = [];
      for (const eventType of WEBHOOK_EVENT_TYPES) {
        const created = await t.webhooks.create(VENDOR, {
          eventType,
          callbackUrl: `${receiver.base}/hooks`,
          secret: SECRET,
        });
        if (!created.ok) throw new Error(`could not register ${eventType}`);
        webhookIds.push(created.webhook.id);
      }
      const vendorKey = await t.keyFor(['vendor'], VENDOR);
      const answer = await t.app.inject({
        method: 'POST',
        url: `/vendors/v1/webhooks/${webhookIds[0]}/test`,
        headers: { 'x-api-key': vendorKey },
      });
      testEventId = answer.json<{ event_id: string }>().event_id;
    };
    await Promise.all([project(), engine()]);
    // Longer than the work: the build lock may be held by another test's build for minutes.
  }, 420_000);

  afterAll(async () => {
    await worker?.close();
    await receiver?.close();
    await t?.close();
    rmSync(scratch, { recursive: true, force: true });
  });

  it.each(PACKAGES)(
    '@hookline/%s packs its built code, declarations and README, and no runtime dependencies',
    (name) => {
      const files = packed.get(name)!.files.map((f) => f.path);
      expect(files.filter((file) => !/^(package\.json|README\.md|dist\/[\w/-]+\.(js|d\.ts))$/.test(file))).toEqual([]);
      expect(files).toEqual(
        expect.arrayContaining([`dist/${name}/index.js`, `dist/${name}/index.d.ts`, 'dist/wire/events.d.ts']),
      );
      const manifest = JSON.parse(
        readFileSync(path.join(scratch, 'node_modules/@hookline', name, 'package.json'), 'utf8'),
      ) as Record<string, unknown>;
      expect(manifest).toMatchObject({
        name: `@hookline/${name}`,
        type: 'module',
        license: 'Apache-2.0',
        engines: { node: '>=20.19' },
      });
      for (const field of ['dependencies', 'peerDependencies', 'optionalDependencies', 'bundleDependencies'])
        expect(manifest[field], field).toBeUndefined();
    },
  );

  it('installs nothing besides the two packages', () => {
    expect(readdirSync(path.join(scratch, 'node_modules')).filter((entry) => !entry.startsWith('.'))).toEqual([
      '@hookline',
    ]);
    expect(readdirSync(path.join(scratch, 'node_modules/@hookline')).sort()).toEqual(['producer', 'verify']);
  });

  describe.each(Object.keys(MODES) as Mode[])('a consumer compiled with moduleResolution %s', (mode) => {
    it('type-checks against the installed packages', () => {
      expect(compiled.get(mode)).toBe('');
    });

    it('publishes an event of each type to the engine, and verifies what the engine delivers', async () => {
      const consumer = (...args: string[]) =>
        run(process.execPath, [path.join(scratch, mode, 'out/consumer.js'), ...args], {
          env: { ...cleanEnv(), HOOKLINE_URL: engineUrl, HOOKLINE_KEY: eventsKey, WEBHOOK_SECRET: SECRET },
        });

      const published = JSON.parse((await consumer('publish', VENDOR, mode)).stdout) as {
        event_id: string;
        status: string;
        deliveries: number;
      }[];
      expect(published.map(({ status, deliveries }) => ({ status, deliveries }))).toEqual(
        WEBHOOK_EVENT_TYPES.map(() => ({ status: 'accepted', deliveries: 1 })),
      );

      const ids = [...published.map((result) => result.event_id), testEventId];
      const requests = await waitFor(
        () => {
          const found = ids.map((id) => receiver.requests.find((request) => request.headers['webhook-id'] === id));
          return found.every((request): request is ReceivedRequest => request !== undefined) && found;
        },
        15_000,
        `the deliveries of ${mode}'s events`,
      );
      const file = path.join(scratch, mode, 'deliveries.json');
      writeFileSync(file, JSON.stringify(requests.map(({ headers, body }) => ({ headers, body }))));

      const verified = (await consumer('verify', file)).stdout
        .trim()
        .split('\n')
        .map((line) => JSON.parse(line) as unknown);
      const checked = (subject: string, index: number) => ({
        event_id: ids[index],
        standard: true,
        legacy: true,
        tampered: false,
        subject,
      });
      expect(verified).toEqual(
        [
          `machine m-${mode} available`,
          `machine m-${mode} unavailable`,
          `machine m-${mode} removed`,
          `deployment d-${mode} STATUS_RUNNING`,
          `deployment d-${mode} STATUS_RUNNING`,
          `deployment d-${mode} STATUS_STOPPED`,
          'test: A test event sent from the Hookline API.',
        ].map(checked),
      );
    });
  });
});
