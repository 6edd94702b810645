import { describe, expect, it } from 'vitest';
import { KEY_PUBLISH_LEAD_MS, publishedKeysAt, signingKeysAt } from '../../src/domain/signing-keys.js';

const MINUTE = 60_000;
const OVERLAP = 24 * 60 * MINUTE;
const ROTATED_AT = 1_700_000_000_000;

type Key = { kid: string; createdAtMs: number; fromMs?: number; untilMs?: number };

/** A webhook's keys right after a rotation at ROTATED_AT, as the registry stores them: the new one first. */
const KEYS: Key[] = [
  { kid: 'new', createdAtMs: ROTATED_AT, fromMs: ROTATED_AT + KEY_PUBLISH_LEAD_MS },
  { kid: 'old', createdAtMs: ROTATED_AT - 30 * 24 * 60 * MINUTE, untilMs: ROTATED_AT + KEY_PUBLISH_LEAD_MS + OVERLAP },
];

const kids = (keys: readonly { kid: string }[]) => keys.map((key) => key.kid);

describe('a rotated signing key: published first, signing after the lead, the replaced one for the overlap after that', () => {
  it('is published longer than the key set may be cached, twice over', () => {
    expect(KEY_PUBLISH_LEAD_MS).toBe(10 * MINUTE);
  });

  it.each([
    ['at the rotation', ROTATED_AT, ['new', 'old'], ['old']],
    ['a moment before the lead ends', ROTATED_AT + KEY_PUBLISH_LEAD_MS - 1, ['new', 'old'], ['old']],
    ['when the lead ends', ROTATED_AT + KEY_PUBLISH_LEAD_MS, ['new', 'old'], ['new', 'old']],
    ['during the overlap', ROTATED_AT + KEY_PUBLISH_LEAD_MS + OVERLAP - 1, ['new', 'old'], ['new', 'old']],
    ['when the overlap ends', ROTATED_AT + KEY_PUBLISH_LEAD_MS + OVERLAP, ['new'], ['new']],
  ])('%s: published %j, signing %j', (_when, nowMs, published, signing) => {
    expect(kids(publishedKeysAt(KEYS, nowMs))).toEqual(published);
    expect(kids(signingKeysAt(KEYS, nowMs))).toEqual(signing);
  });

  it('a first key (no fromMs) signs as soon as it exists', () => {
    const first: Key[] = [{ kid: 'first', createdAtMs: ROTATED_AT }];
    expect(kids(signingKeysAt(first, ROTATED_AT))).toEqual(['first']);
  });
});
