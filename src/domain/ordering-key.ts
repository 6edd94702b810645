import { pathProblem, valueAt } from './filter.js';

/**
 * Ordering keys of FIFO webhooks (`ordering_key`): a path into the delivered envelope, named as
 * payload filters name paths (`data.metadata.machine_id`), whose value picks the line a delivery
 * waits in. Each line keeps accept order and lines go out in parallel, so the deliveries of one key
 * value keep their order while a value whose deliveries keep failing holds back only its own line.
 *
 * Why buckets rather than a line per value: values come from producers' events and are unbounded
 * (one per machine), while every line costs Redis keys and an entry in its partition's ready set.
 * A value is hashed into one of ORDERING_KEY_BUCKETS lines of its webhook, so a webhook has at most
 * that many keyed lines however many values it sees, plus its own line, which takes the events
 * without a value. Values that share a bucket share its line: they keep order with each other as
 * well, and one of them failing holds the others of its bucket. That is the price of bounded memory.
 *
 * Why a constant and not a setting: a value's bucket must be the same in every process and over
 * time. Were it not (two workers configured apart, or a change while deliveries wait), the
 * deliveries of one value would wait in two lines and could overtake each other.
 */
export const ORDERING_KEY_BUCKETS = 64;

/** Why `input` is not an ordering key (a path as filters name them), or undefined when it is one. */
export function orderingKeyProblem(input: unknown): string | undefined {
  return pathProblem(input, 'ordering_key');
}

/**
 * The key value an envelope has at the checked path `orderingKey`: the JSON text of a string,
 * number or boolean found there (so `"7"` and `7` are different values); undefined when the path
 * leads nowhere, or to null, an object or a list: such an event has no key.
 */
export function orderingKeyValue(envelope: unknown, orderingKey: string): string | undefined {
  const value = valueAt(envelope, orderingKey.split('.'));
  if (typeof value === 'string' || typeof value === 'number' || typeof value === 'boolean')
    return JSON.stringify(value);
  return undefined;
}

/** FNV-1a (32 bits) of the UTF-8 bytes of `text`: cheap, and the same in every process and version. */
export function fnv1a32(text: string): number {
  let hash = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) hash = Math.imul(hash ^ byte, 0x01000193);
  return hash >>> 0;
}

/** The bucket (0 to ORDERING_KEY_BUCKETS - 1) of a key value. */
export function bucketOfKeyValue(value: string): number {
  return fnv1a32(value) % ORDERING_KEY_BUCKETS;
}

/**
 * The bucket whose line an envelope's delivery waits in, for a webhook ordered by `orderingKey`;
 * undefined when the envelope has no key value there (the webhook's own line takes it).
 */
export function orderingBucketOf(envelope: unknown, orderingKey: string): number | undefined {
  const value = orderingKeyValue(envelope, orderingKey);
  return value === undefined ? undefined : bucketOfKeyValue(value);
}

/**
 * As orderingBucketOf, for a delivery's body (the envelope's JSON, as a replay carries it); a body
 * that is not JSON has no key value.
 */
export function orderingBucketOfBody(body: string, orderingKey: string): number | undefined {
  let envelope: unknown;
  try {
    envelope = JSON.parse(body);
  } catch {
    return undefined;
  }
  return orderingBucketOf(envelope, orderingKey);
}
