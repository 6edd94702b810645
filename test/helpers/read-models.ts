import type { RedisKeys } from '../../src/store/keys.js';
import type { Redis } from '../../src/store/redis.js';
import { waitFor } from './wait.js';

/**
 * How long the tests give the read models to show what ingest accepted: far above the bound
 * docs/api.md states (a projector deletes an entry as soon as its changes are visible, within
 * milliseconds while it runs), so a test fails on a lost change, not on a slow machine.
 */
export const PROJECTION_BOUND_MS = 5_000;

/**
 * Waits until everything ingest has accepted so far is visible in the lookups: the projection stream
 * holds no entry (a projector deletes each entry once its changes are applied, or once it left a
 * malformed one out). Throws after `timeoutMs`.
 */
export async function readModelsProjected(
  redis: Redis,
  keys: Pick<RedisKeys, 'readModels'>,
  timeoutMs = PROJECTION_BOUND_MS,
): Promise<void> {
  await waitFor(
    async () => (await redis.xlen(keys.readModels.projection)) === 0,
    timeoutMs,
    'the read models to show every accepted change',
    5,
  );
}
