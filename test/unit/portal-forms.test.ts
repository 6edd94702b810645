import { afterEach, describe, expect, it } from 'vitest';
import { isoFromLocal, localFromMs } from '../../web/portal/src/local-time.js';
import { newRangeForm, rangeReplayBody, type RangeForm } from '../../web/portal/src/range-replay-body.js';
import { retentionChange } from '../../web/portal/src/retention.js';
import { includeFieldsChange, retryChange, retryText, scheduleOf } from '../../web/portal/src/retry-policy.js';
import { DELIVERY_STATUSES } from '../../web/portal/src/types.js';

/*
 * The portal's form rules, as pure functions: no browser here. The browser's zone is the process's
 * (TZ, which Node reads again whenever it is set), so each case names the zone it is about.
 */
const savedZone = process.env.TZ;
const inZone = (zone: string) => {
  process.env.TZ = zone;
};
afterEach(() => {
  if (savedZone === undefined) delete process.env.TZ;
  else process.env.TZ = savedZone;
});

describe('datetime-local values and the UTC times the API takes', () => {
  it('reads a value in the browser’s zone and answers it in UTC, to the second or millisecond typed', () => {
    inZone('Asia/Kolkata');
    expect(isoFromLocal('2026-03-02T09:14')).toBe('2026-03-02T03:44:00Z');
    expect(isoFromLocal('2026-03-02T09:14:05')).toBe('2026-03-02T03:44:05Z');
    expect(isoFromLocal('2026-03-02T09:14:05.5')).toBe('2026-03-02T03:44:05.500Z');
    inZone('America/Los_Angeles');
    expect(isoFromLocal('2026-03-02T20:00')).toBe('2026-03-03T04:00:00Z');
    inZone('UTC');
    expect(isoFromLocal('2026-03-02T09:14')).toBe('2026-03-02T09:14:00Z');
  });

  it('follows daylight saving: the offset of the date typed; a skipped hour moves on, a repeated one is its first', () => {
    inZone('Europe/Berlin');
    expect(isoFromLocal('2026-01-15T12:00')).toBe('2026-01-15T11:00:00Z');
    expect(isoFromLocal('2026-07-01T12:00')).toBe('2026-07-01T10:00:00Z');
    expect(isoFromLocal('2026-03-29T02:30')).toBe('2026-03-29T01:30:00Z');
    expect(isoFromLocal('2026-10-25T02:30')).toBe('2026-10-25T00:30:00Z');
  });

  it('answers nothing for an empty, malformed or impossible value rather than another time', () => {
    inZone('Europe/Berlin');
    for (const value of [
      '',
      'yesterday',
      '2026-03-02 09:14',
      '2026-03-02T09:14Z',
      '2026-02-30T10:00',
      '2026-13-01T10:00',
      '2026-03-02T24:00',
      '2026-03-02T09:60',
    ])
      expect(isoFromLocal(value), value).toBeUndefined();
  });

  it('shows a time as such an input does, to the minute, and reads back to that minute', () => {
    const atMs = Date.parse('2026-03-02T03:44:59.999Z');
    for (const [zone, shown] of [
      ['Asia/Kolkata', '2026-03-02T09:14'],
      ['America/Los_Angeles', '2026-03-01T19:44'],
      ['UTC', '2026-03-02T03:44'],
    ] as const) {
      inZone(zone);
      expect(localFromMs(atMs), zone).toBe(shown);
      expect(isoFromLocal(shown), zone).toBe('2026-03-02T03:44:00Z');
    }
  });
});

describe('the range replay form → the body of POST …/replay', () => {
  const nowMs = Date.parse('2026-03-02T03:44:30.250Z');
  const form = (over: Partial<RangeForm> = {}): RangeForm => ({ ...newRangeForm(nowMs), ...over });

  it('starts an hour back to the minute, until now, every status, no pace: a body with times alone', () => {
    inZone('Asia/Kolkata');
    expect(newRangeForm(nowMs)).toEqual({
      since: '2026-03-02T08:14',
      until: '',
      statuses: [...DELIVERY_STATUSES],
      rate: '',
    });
    // An empty "to" is fixed at the time of counting, so the replay confirmed is the range counted.
    expect(rangeReplayBody(form(), nowMs)).toEqual({
      since: '2026-03-02T02:44:00Z',
      until: '2026-03-02T03:44:30.250Z',
    });
  });

  it('sends a typed "to" in UTC, the statuses checked in the list’s order, and the rate as a number', () => {
    inZone('America/Los_Angeles');
    const body = rangeReplayBody(
      form({ since: '2026-03-01T08:00', until: '2026-03-01T17:30', statuses: ['dead', 'delivered'], rate: ' 25 ' }),
      nowMs,
    );
    expect(body).toEqual({
      since: '2026-03-01T16:00:00Z',
      until: '2026-03-02T01:30:00Z',
      statuses: ['delivered', 'dead'],
      rate_per_second: 25,
    });
  });

  it('leaves the API to judge what it checks itself: times the wrong way round, a rate out of range', () => {
    inZone('UTC');
    expect(rangeReplayBody(form({ since: '2026-03-02T10:00', until: '2026-03-02T09:00', rate: '0' }), nowMs)).toEqual({
      since: '2026-03-02T10:00:00Z',
      until: '2026-03-02T09:00:00Z',
      rate_per_second: 0,
    });
  });

  it('refuses, in words, what it can tell is missing: a start, a readable end, a status', () => {
    inZone('UTC');
    expect(() => rangeReplayBody(form({ since: '' }), nowMs)).toThrow(
      'Choose the date and time the range starts from.',
    );
    expect(() => rangeReplayBody(form({ until: '2026-02-30T10:00' }), nowMs)).toThrow(
      'The time the range ends is not a date and time; empty means now.',
    );
    expect(() => rangeReplayBody(form({ statuses: [] }), nowMs)).toThrow('Check at least one status.');
  });
});

describe('the webhook form’s retention field → what a save sends', () => {
  it('a new webhook: the text, trimmed, or nothing when empty (the installation’s retention)', () => {
    expect(retentionChange(undefined, '')).toBeUndefined();
    expect(retentionChange(undefined, '  ')).toBeUndefined();
    expect(retentionChange(undefined, ' 3d ')).toBe('3d');
  });

  it('an edit: only a change, and null for a field emptied', () => {
    expect(retentionChange({ retention: null }, '')).toBeUndefined();
    expect(retentionChange({ retention: null }, '24h')).toBe('24h');
    expect(retentionChange({ retention: '3d' }, '3d')).toBeUndefined();
    expect(retentionChange({ retention: '3d' }, '')).toBeNull();
    expect(retentionChange({ retention: '3d' }, '12h')).toBe('12h');
  });

  it('an engine that answers no retention has the installation’s: an empty field sends nothing', () => {
    expect(retentionChange({} as { retention: string | null }, '')).toBeUndefined();
  });
});

describe('the webhook form’s retry fields', () => {
  it('reads delays separated by commas or spaces', () => {
    expect(scheduleOf(' 30s, 5m  1h,')).toEqual(['30s', '5m', '1h']);
    expect(scheduleOf(' , ')).toBeNull();
  });

  it('a new webhook: the policy typed, or nothing when both fields are empty', () => {
    expect(retryChange(undefined, '', ' ')).toBeUndefined();
    expect(retryChange(undefined, '30s, 5m', '')).toEqual({ schedule: ['30s', '5m'] });
    expect(retryChange(undefined, '', '1h')).toEqual({ max_age: '1h' });
  });

  it('an edit: the whole policy when either field changed, null when both are emptied, nothing when unchanged', () => {
    const current = { retry: { schedule: ['30s', '5m'], max_age: '1h' } };
    expect(retryChange(current, '30s,5m', '1h')).toBeUndefined();
    expect(retryChange(current, '30s, 5m', '2h')).toEqual({ schedule: ['30s', '5m'], max_age: '2h' });
    expect(retryChange(current, '', '1h')).toEqual({ max_age: '1h' });
    expect(retryChange(current, '', '')).toBeNull();
    expect(retryChange({ retry: null }, '', '')).toBeUndefined();
    expect(retryChange({}, '', '')).toBeUndefined();
    expect(retryChange({ retry: null }, '1m', '')).toEqual({ schedule: ['1m'] });
  });

  it('says the policy in words on the card', () => {
    expect(retryText({ retry: null })).toBe('The installation’s schedule');
    expect(retryText({ retry: { schedule: ['30s', '5m'], max_age: null } })).toBe('Retries after 30s, 5m');
    expect(retryText({ retry: { schedule: null, max_age: '1h' } })).toBe(
      'The installation’s schedule; not sent after 1h',
    );
  });
});

describe('the webhook form’s fields-sent field', () => {
  it('sends the paths typed, only when changed, and null when emptied', () => {
    expect(includeFieldsChange(undefined, '')).toBeUndefined();
    expect(includeFieldsChange(undefined, 'data.status, data.pricing')).toEqual(['data.status', 'data.pricing']);
    expect(includeFieldsChange({ include_fields: ['data.status'] }, ' data.status ')).toBeUndefined();
    expect(includeFieldsChange({ include_fields: ['data.status'] }, '')).toBeNull();
    expect(includeFieldsChange({ include_fields: null }, '')).toBeUndefined();
    expect(includeFieldsChange({}, 'data.a')).toEqual(['data.a']);
  });
});
