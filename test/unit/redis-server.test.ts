import { describe, expect, it } from 'vitest';
import {
  ensureRedisServerBinary,
  findRedisServerBinary,
  RedisServerUnavailableError,
} from '../../src/embedded/redis-server.js';

describe('ensureRedisServerBinary', () => {
  it('uses a binary that is already there, saying nothing', async () => {
    const said: string[] = [];
    expect(
      await ensureRedisServerBinary((l) => said.push(l), { find: async () => '/opt/redis/bin/redis-server' }),
    ).toBe('/opt/redis/bin/redis-server');
    expect(said).toEqual([]);
  });

  it('without a binary and without apt-get rights, stops with every way forward', async () => {
    const attempt = ensureRedisServerBinary(() => undefined, { find: async () => undefined, canInstall: false });
    await expect(attempt).rejects.toBeInstanceOf(RedisServerUnavailableError);
    await expect(attempt).rejects.toThrow(/redis-server was not found/);
    await expect(attempt).rejects.toThrow(/apt-get install redis-server/);
    await expect(attempt).rejects.toThrow(/REDIS_URL=redis:\/\/host:port/);
    await expect(attempt).rejects.toThrow(/docker compose up/);
  });
});

describe('findRedisServerBinary', () => {
  it('finds nothing on an empty PATH with no extra folders', async () => {
    expect(await findRedisServerBinary('', [])).toBeUndefined();
  });
});
