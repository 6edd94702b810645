import path from 'node:path';
import { setTimeout as delay } from 'node:timers/promises';
import type { Config } from '../config/env.js';
import { redisUrlForLog } from '../config/redis-url.js';
import type { EngineConfig, Stores } from '../engine.js';
import { isRedisUnavailable } from '../store/redis.js';
import { SecretBox } from '../store/secret-box.js';
import { checkSecretKey } from '../store/secret-probe.js';
import { CliError } from './errors.js';

/** How often a check that needs Redis is tried again while Redis does not answer. */
const RETRY_MS = 2_000;

/**
 * Runs `work` once Redis answers: now, or every 2 s while its error says Redis is unavailable, as
 * an engine that starts during an outage waits it out. Resolves with the answer; undefined when
 * `signal` aborts first. Any other error rejects.
 */
async function whenRedisAnswers<T>(work: () => Promise<T>, signal: AbortSignal): Promise<T | undefined> {
  while (!signal.aborted) {
    try {
      return await work();
    } catch (error) {
      if (!(error instanceof Error) || !isRedisUnavailable(error)) throw error;
    }
    // Ends early (rejecting) when aborted; the loop then ends.
    await delay(RETRY_MS, undefined, { signal }).catch(() => undefined);
  }
  return undefined;
}

/**
 * Checks an engine's secret key against the installation's probe (see store/secret-probe.ts). When
 * Redis answers now, a key that does not fit throws a CliError (one sentence) before the engine
 * serves anything. When Redis does not answer, the engine starts as it does during any outage, and
 * the check runs once Redis answers: `later` resolves then with the sentence to stop with. It never
 * resolves for a key that fits, or once `signal` aborts.
 */
export async function checkSecretKeyAtStart(
  stores: Pick<Stores, 'redis' | 'keys'>,
  base: Config,
  config: EngineConfig,
  signal: AbortSignal,
): Promise<{ later: Promise<string> }> {
  const box = new SecretBox(config.secretKey);
  const check = () => checkSecretKey(stores.redis, stores.keys, box);
  const never = new Promise<never>(() => undefined);
  const now = await check().catch((error: Error) => {
    if (isRedisUnavailable(error)) return undefined;
    throw error;
  });
  if (now === 'mismatch') throw new CliError(secretKeyMismatch(base, config.redisUrl));
  if (now !== undefined) return { later: never };
  return { later: whenRedisAnswers(check, signal).then((answer) => (answer === 'mismatch' ? secretKeyMismatch(base, config.redisUrl) : never)) };
}

/**
 * The sentence an engine whose secret key does not open the stored secrets stops with: where the
 * key came from (HOOKLINE_SECRET_KEY, or the embedded default's file) and which Redis holds them.
 */
function secretKeyMismatch(base: Config, redisUrl: string): string {
  const source =
    base.secretKey !== undefined
      ? 'HOOKLINE_SECRET_KEY'
      : `the secret key in ${path.join(base.dataDir, 'secret.key')} (used while HOOKLINE_SECRET_KEY is unset)`;
  return (
    `${source} does not open the webhook secrets stored in ${redisUrlForLog(redisUrl)} (prefix ${base.redisPrefix}): ` +
    'they were sealed with another key; start with that one as HOOKLINE_SECRET_KEY'
  );
}
