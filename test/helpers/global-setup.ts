import { execFileSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import { withBuildLock } from './build-lock.js';
import { hasOpenssl, makeTestCa, type TestCa } from './test-ca.js';
import {
  ensureRedisServerBinary,
  RedisServerUnavailableError,
  startRedisServer,
  type RedisServerHandle,
} from '../../src/embedded/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
    /** The run's test CA (undefined where openssl is missing), trusted by the test processes through NODE_EXTRA_CA_CERTS. */
    testCa: TestCa | undefined;
  }
}

/**
 * A CA made for this run, trusted the way a user would trust one: NODE_EXTRA_CA_CERTS, which Node
 * reads as a process starts, so it is set here for the processes started from now on (the CLI's).
 * A test worker vitest started before this setup ran does not read it: in-process senders are given
 * the CA explicitly.
 */
function trustTestCa(): { ca: TestCa | undefined; cleanup: () => void } {
  if (!hasOpenssl()) {
    if (process.env.CI) throw new Error('the HTTPS receiver tests need openssl in CI (apt-get install openssl)');
    console.warn('skipping the HTTPS receiver tests: openssl is not installed (Debian: apt-get install openssl)');
    return { ca: undefined, cleanup: () => undefined };
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-ca-'));
  const ca = makeTestCa(dir);
  process.env.NODE_EXTRA_CA_CERTS = ca.caPath;
  return { ca, cleanup: () => rmSync(dir, { recursive: true, force: true }) };
}

interface RunningRedis {
  url: string;
  how: string;
  stop(): Promise<void>;
}

/** testcontainers' Redis module, when a container runtime answers quickly. */
async function fromContainer(): Promise<RunningRedis | undefined> {
  try {
    const { getContainerRuntimeClient } = await import('testcontainers');
    const probe = getContainerRuntimeClient();
    const answered = await Promise.race([
      probe.then(
        () => true,
        () => false,
      ),
      new Promise<boolean>((r) => setTimeout(() => r(false), 5_000)),
    ]);
    if (!answered) return undefined;
    const { RedisContainer } = await import('@testcontainers/redis');
    const container = await new RedisContainer('redis:7-alpine').start();
    return {
      url: container.getConnectionUrl(),
      how: 'testcontainers redis:7-alpine',
      stop: async () => void (await container.stop()),
    };
  } catch {
    return undefined;
  }
}

/** A `redis-server` on a free loopback port (installed with apt-get on Debian as root when missing). */
async function fromBinary(): Promise<RunningRedis | undefined> {
  let binary: string;
  try {
    binary = await ensureRedisServerBinary((line) => console.error(line));
  } catch (error) {
    if (error instanceof RedisServerUnavailableError) return undefined;
    throw error;
  }
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-test-redis-'));
  const server: RedisServerHandle = await startRedisServer({ binary, port: 0, dir, appendOnly: false });
  return {
    url: server.url,
    how: `${binary} on port ${server.port}`,
    stop: async () => {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

const ROOT = path.resolve(import.meta.dirname, '../..');

/**
 * Engines the tests start from source serve the vendor portal from dist/portal, as `hookline start`
 * does (an unbuilt portal answers 503 and logs a warning first thing): it is built here, as
 * `npm run build` builds it, so that `npm test` on a clean clone needs nothing built before it and
 * no test depends on another having run `npm start`. The build is incremental (nothing is written
 * when its inputs are unchanged) and takes the build lock, as `npm start` in the tests does.
 */
async function buildPortal(): Promise<void> {
  await withBuildLock(async () => {
    execFileSync(process.execPath, [path.join(ROOT, 'web/portal/build.mjs')], {
      cwd: ROOT,
      stdio: ['ignore', 'ignore', 'inherit'],
    });
  });
}

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  await buildPortal();
  const redis =
    (await fromContainer()) ??
    (await fromBinary()) ??
    (process.env.REDIS_URL ? { url: process.env.REDIS_URL, how: 'REDIS_URL', stop: async () => undefined } : undefined);
  if (!redis) {
    throw new Error('Integration tests need Redis: start a container runtime, install redis-server, or set REDIS_URL.');
  }
  console.error(`integration tests use Redis from ${redis.how}`);
  project.provide('redisUrl', redis.url);
  const tls = trustTestCa();
  project.provide('testCa', tls.ca);
  return async () => {
    tls.cleanup();
    await redis.stop();
  };
}
