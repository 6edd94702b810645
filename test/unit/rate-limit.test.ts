import { describe, expect, it } from 'vitest';
import { DEFER_HORIZON_US, placeUs, takeSendToken, type BucketState } from '../../src/domain/rate-limit.js';

const T0 = 1_764_000_000_000_000; // µs

/** Takes tokens at these times (µs after T0) from a fresh bucket: what each take answered (0 = sent, else the wait). */
function run(rate: number, timesUs: readonly number[], random = 0.5): number[] {
  let state: BucketState | undefined;
  return timesUs.map((t) => {
    const take = takeSendToken(state, rate, T0 + t, random);
    state = take.state;
    return take.sent ? 0 : take.retryInUs;
  });
}

describe('takeSendToken (at most `rate` sends in any one second, counted in 50 ms slots)', () => {
  it('places in the line of refusals are the window (1.05 s) ÷ rate apart, rounded up', () => {
    expect(placeUs(1)).toBe(1_050_000);
    expect(placeUs(3)).toBe(350_000);
    expect(placeUs(20)).toBe(52_500);
    expect(placeUs(10_000)).toBe(105);
  });

  it('sends `rate` at once, then refuses until the second has passed; refusals queue behind each other', () => {
    // rate 4 at T0 (slot-aligned): 4 sent; the window has room again when slot 0 leaves it, at 1.05 s.
    expect(run(4, [0, 0, 0, 0, 0, 0, 0])).toEqual([
      0,
      0,
      0,
      0,
      1_050_000,
      1_050_000 + 262_500,
      1_050_000 + 2 * 262_500,
    ]);
  });

  it('a refused send that comes back at its time is sent', () => {
    expect(run(2, [0, 0, 0, 1_050_000])).toEqual([0, 0, 1_050_000, 0]);
  });

  it('a send that goes late moves nothing for the ones after it', () => {
    // rate 2, two refused at 10 ms: places at 1.05 s and 1.575 s. The first comes back 400 ms late
    // (1.45 s, sent); the second comes back on time and is sent too: the window holds one send.
    expect(run(2, [0, 0, 10_000, 10_000, 1_450_000, 1_575_000])).toEqual([0, 0, 1_040_000, 1_565_000, 0, 0]);
  });

  it('an idle webhook saves nothing up beyond `rate` in a second', () => {
    expect(run(2, [0, 10_000_000, 10_000_000, 10_000_000])).toEqual([0, 0, 0, 1_050_000]);
  });

  it('a fresh send may take a free place before the line of refusals', () => {
    // rate 1: the 3rd asks just before the 2nd's place and queues behind it; the 4th asks when there is room and takes it.
    expect(run(1, [0, 0, 1_049_999, 1_050_000])).toEqual([0, 1_050_000, 1_050_001, 0]);
  });

  it('never sends more than `rate` in any window of one second, and reaches at least rate ÷ 1.05 over long spans', () => {
    const rate = 20;
    let state: BucketState | undefined;
    const sentAt: number[] = [];
    // Someone asks every 700 µs (not aligned to the slots) for 10 s.
    for (let t = 0; t < 10_000_000; t += 700) {
      const take = takeSendToken(state, rate, T0 + t, 0.5);
      state = take.state;
      if (take.sent) sentAt.push(t);
    }
    const inWindow = (fromUs: number) => sentAt.filter((t) => t >= fromUs && t < fromUs + 1_000_000).length;
    // The first 20 asks go at once.
    expect(sentAt.slice(0, rate)).toEqual(Array.from({ length: rate }, (_, i) => i * 700));
    for (const t of sentAt) expect(inWindow(t)).toBeLessThanOrEqual(rate);
    expect(sentAt.length).toBeGreaterThanOrEqual(Math.floor((10 * rate) / 1.05));
    expect(sentAt.length).toBeLessThanOrEqual(10 * rate);
  });

  it('random arrivals at many rates never put more than `rate` in any second', () => {
    let seed = 7;
    const random = () => (seed = (seed * 48_271) % 2_147_483_647) / 2_147_483_647;
    for (const rate of [1, 3, 7, 50, 333]) {
      let state: BucketState | undefined;
      const sentAt: number[] = [];
      let t = 0;
      for (let n = 0; n < 5_000; n += 1) {
        t += Math.floor(random() * (4_000_000 / rate));
        const take = takeSendToken(state, rate, T0 + t, random());
        state = take.state;
        if (take.sent) sentAt.push(t);
      }
      let end = 0;
      for (let start = 0; start < sentAt.length; start += 1) {
        while (end < sentAt.length && sentAt[end]! < sentAt[start]! + 1_000_000) end += 1;
        expect({ rate, inOneSecond: end - start }).toEqual({ rate, inOneSecond: Math.min(end - start, rate) });
      }
    }
  });

  it('refusals queue behind each other up to the horizon, then spread over its second half', () => {
    const rate = 1;
    const answers = run(
      rate,
      Array.from({ length: 13 }, () => 0),
      0,
    );
    // 1 sent; the next 9 go in line 1.05 s apart (up to the 10 s horizon); the rest at half the horizon (random 0).
    expect(answers).toEqual([
      0,
      ...Array.from({ length: 9 }, (_, i) => (i + 1) * 1_050_000),
      5_000_000,
      5_000_000,
      5_000_000,
    ]);
    expect(run(rate, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.999_999).at(-1)).toBe(
      Math.floor(DEFER_HORIZON_US / 2 + (0.999_999 * DEFER_HORIZON_US) / 2),
    );
  });

  it('the line of refusals starts over once it has passed', () => {
    // rate 1: the 2nd and 3rd wait in line; 5 s later a send goes at once and the next waits only for its own second.
    expect(run(1, [0, 0, 0, 5_000_000, 5_000_000])).toEqual([0, 1_050_000, 2_100_000, 0, 1_050_000]);
  });
});
