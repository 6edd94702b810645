import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import type { TestProject } from 'vitest/node';
import {
  ensureRedisServerBinary,
  RedisServerUnavailableError,
  startRedisServer,
  type RedisServerHandle,
} from '../../src/embedded/redis-server.js';

declare module 'vitest' {
  export interface ProvidedContext {
    redisUrl: string;
  }
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

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const redis =
    (await fromContainer()) ??
    (await fromBinary()) ??
    (process.env.REDIS_URL ? { url: process.env.REDIS_URL, how: 'REDIS_URL', stop: async () => undefined } : undefined);
  if (!redis) {
    throw new Error('Integration tests need Redis: start a container runtime, install redis-server, or set REDIS_URL.');
  }
  console.error(`integration tests use Redis from ${redis.how}`);
  project.provide('redisUrl', redis.url);
  return () => redis.stop();
}
