import { describe, expect, it } from 'vitest';
import {
  bucketOfKeyValue,
  fnv1a32,
  ORDERING_KEY_BUCKETS,
  orderingBucketOf,
  orderingKeyProblem,
  orderingKeyValue,
} from '../../src/domain/ordering-key.js';

const envelope = {
  version: '1.0',
  event_id: 'evt-1',
  event_type: 'EVENT_TYPE_MACHINE_UPDATED',
  timestamp: '2026-11-24T10:00:00.000Z',
  data: {
    status: 'unavailable',
    metadata: { machine_id: 'm-1', host_id: 7, spot: true, region: null },
    gpus: [{ name: 'H100' }, { name: 'A100' }],
    tags: { tier: 'gold' },
  },
};

describe('ordering keys: the path', () => {
  it.each(['data.metadata.machine_id', 'data.gpus.0.name', 'event_type', 'data', 'data.a-b_c.D9'])(
    'accepts %s (the path syntax of payload filters)',
    (path) => expect(orderingKeyProblem(path)).toBeUndefined(),
  );

  it.each([
    ['', 'ordering_key: must be a dotted path into the event'],
    [7, 'ordering_key: must be a dotted path into the event'],
    [null, 'ordering_key: must be a dotted path into the event'],
    ['metadata.machine_id', 'ordering_key: must start with data, event_type, event_id, timestamp or version'],
    ['event_type.x', 'ordering_key: only data has fields below it'],
    ['data..machine_id', 'ordering_key: "" is not a key'],
    ['data.machine id', 'ordering_key: "machine id" is not a key'],
    ['data.a.b.c.d.e.f.g.h', 'ordering_key: at most 8 segments'],
    [`data.${'x'.repeat(65)}`, 'is not a key (letters, digits, _ and -, at most 64)'],
  ])('refuses %j, naming the field', (path, problem) => expect(orderingKeyProblem(path)).toContain(problem));
});

describe('ordering keys: the value of an envelope', () => {
  it.each([
    ['data.metadata.machine_id', '"m-1"'],
    ['data.metadata.host_id', '7'],
    ['data.metadata.spot', 'true'],
    ['data.gpus.1.name', '"A100"'],
    ['event_type', '"EVENT_TYPE_MACHINE_UPDATED"'],
  ])('%s is the JSON text of the scalar found (%s)', (path, value) =>
    expect(orderingKeyValue(envelope, path)).toBe(value),
  );

  it.each([
    ['data.metadata.missing', 'a missing key'],
    ['data.gpus.2.name', 'past the end of a list'],
    ['data.gpus.x', 'a key into a list'],
    ['data.status.length', 'below a string'],
    ['data.metadata.region', 'null'],
    ['data.tags', 'an object'],
    ['data.gpus', 'a list'],
  ])('%s has no value (%s): the webhook’s own line takes it', (path) => {
    expect(orderingKeyValue(envelope, path)).toBeUndefined();
    expect(orderingBucketOf(envelope, path)).toBeUndefined();
  });

  it('tells a string from the number it spells', () => {
    expect(orderingKeyValue({ data: { k: '7' } }, 'data.k')).toBe('"7"');
    expect(orderingKeyValue({ data: { k: 7 } }, 'data.k')).toBe('7');
  });
});

describe('ordering keys: buckets', () => {
  it('FNV-1a 32 of the UTF-8 bytes, against its published vectors', () => {
    expect(fnv1a32('')).toBe(0x811c9dc5);
    expect(fnv1a32('a')).toBe(0xe40c292c);
    expect(fnv1a32('foobar')).toBe(0xbf9cf968);
  });

  it('fixed vectors: the same bucket in every process and version (a change would split a value over two lines)', () => {
    expect(ORDERING_KEY_BUCKETS).toBe(64);
    expect(bucketOfKeyValue('"m-1"')).toBe(8);
    expect(bucketOfKeyValue('"m-2"')).toBe(31);
    expect(bucketOfKeyValue('7')).toBe(54);
    expect(bucketOfKeyValue('"7"')).toBe(28);
    expect(bucketOfKeyValue('true')).toBe(37);
    expect(bucketOfKeyValue('"é"')).toBe(57);
    expect(orderingBucketOf(envelope, 'data.metadata.machine_id')).toBe(8);
  });

  it('spreads many values over every bucket, none much above its share', () => {
    const counts = new Array<number>(ORDERING_KEY_BUCKETS).fill(0);
    const VALUES = 64_000;
    for (let i = 0; i < VALUES; i++) counts[bucketOfKeyValue(JSON.stringify(`m-${i}`))]! += 1;
    const share = VALUES / ORDERING_KEY_BUCKETS;
    expect(Math.min(...counts)).toBeGreaterThan(share * 0.9);
    expect(Math.max(...counts)).toBeLessThan(share * 1.1);
  });
});
