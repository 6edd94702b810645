import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import type { SecretBox } from './secret-box.js';

/**
 * Whether the secret key a process starts with is the one this installation's webhook secrets are
 * sealed with. Another key opens none of them: the API would say it is ready and then answer 500 on
 * every webhook read, and workers could sign nothing. So the first start seals a known value under
 * its key (the probe) and every start opens it: one read tells whether the key fits. An
 * installation from before the probe gets one at its next start, when a secret it stores opens
 * under the key (or when it stores none yet).
 */

const PROBE_TEXT = 'hookline secret key probe';
/** The associated data the probe is sealed with: no webhook id looks like it. */
const PROBE_DATA = 'secret-key-probe';
/** Records read per round trip while looking for a sealed value (once, at the first start with this version). */
const SCAN_COUNT = 200;

/** `matches` or `recorded` (the probe was missing and is now sealed under this key): the key fits; `mismatch`: it does not. */
export type SecretKeyCheck = 'matches' | 'recorded' | 'mismatch';

/** Opens `sealed` with `box`; false instead of the cipher's error when the key (or the data) does not fit. */
function opens(box: SecretBox, sealed: string, associatedData: string): boolean {
  try {
    box.open(sealed, associatedData);
    return true;
  } catch {
    return false;
  }
}

/** One sealed value of the stored webhooks (a secret or a private signing key) and what it is bound to, if any is stored. */
async function sealedWebhookValue(
  redis: Redis,
  keys: Pick<RedisKeys, 'webhooks'>,
): Promise<{ sealed: string; associatedData: string } | undefined> {
  let cursor = '0';
  do {
    const [next, flat] = await redis.hscan(keys.webhooks.byId, cursor, 'COUNT', SCAN_COUNT);
    for (let i = 1; i < flat.length; i += 2) {
      // The record's own schema lives with the registry; these fields are all the check needs.
      const record = JSON.parse(flat[i]!) as {
        id: string;
        secretSealed?: string;
        signingKeys?: { privateSealed: string }[];
      };
      const sealed = record.secretSealed ?? record.signingKeys?.[0]?.privateSealed;
      if (sealed !== undefined) return { sealed, associatedData: record.id };
    }
    cursor = next;
  } while (cursor !== '0');
  return undefined;
}

/** Checks `box`'s key against the installation's probe, recording the probe when it has none yet (see above). */
export async function checkSecretKey(
  redis: Redis,
  keys: Pick<RedisKeys, 'secretProbe' | 'webhooks'>,
  box: SecretBox,
): Promise<SecretKeyCheck> {
  const fits = (probe: string) => (opens(box, probe, PROBE_DATA) ? 'matches' : 'mismatch');
  const probe = await redis.get(keys.secretProbe);
  if (probe !== null) return fits(probe);
  const stored = await sealedWebhookValue(redis, keys);
  if (stored !== undefined && !opens(box, stored.sealed, stored.associatedData)) return 'mismatch';
  if ((await redis.set(keys.secretProbe, box.seal(PROBE_TEXT, PROBE_DATA), 'NX')) === 'OK') return 'recorded';
  // Another process recorded its probe meanwhile: the key must open that one.
  return fits((await redis.get(keys.secretProbe)) ?? '');
}
