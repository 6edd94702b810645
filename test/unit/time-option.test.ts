import { describe, expect, it } from 'vitest';
import { timeOptionMs } from '../../src/cli/time-option.js';

const NOW_MS = Date.parse('2026-11-24T12:00:00.000Z');

describe('timeOptionMs (the CLI’s --since and --until)', () => {
  it.each([
    ['2026-11-24T10:00:00Z', Date.parse('2026-11-24T10:00:00Z')],
    ['2026-11-24T10:00:00.250+01:00', Date.parse('2026-11-24T09:00:00.250Z')],
    ['30m', NOW_MS - 30 * 60_000],
    ['2h', NOW_MS - 2 * 3_600_000],
    ['3d', NOW_MS - 3 * 86_400_000],
    ['90s', NOW_MS - 90_000],
    ['0s', NOW_MS],
  ])('reads %s', (text, ms) => expect(timeOptionMs(text, NOW_MS)).toBe(ms));

  it.each(['', 'yesterday', '2h ago', '-2h', '2x', '2026-11-24', '2026-13-45T99:00:00Z', '1700000000'])(
    'rejects %j',
    (text) => expect(timeOptionMs(text, NOW_MS)).toBeUndefined(),
  );
});
