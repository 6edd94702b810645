import { describe, expect, it } from 'vitest';
import { DEFER_HORIZON_US, intervalUs, takeSendToken, type BucketState } from '../../src/domain/rate-limit.js';

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

describe('takeSendToken (token bucket, burst = rate, kept as GCRA)', () => {
  it('spaces tokens 1/rate apart, rounded up so the rate is never exceeded', () => {
    expect(intervalUs(1)).toBe(1_000_000);
    expect(intervalUs(3)).toBe(333_334);
    expect(intervalUs(20)).toBe(50_000);
    expect(intervalUs(10_000)).toBe(100);
  });

  it('a full bucket gives the burst (= rate) at once, then one token per interval', () => {
    // rate 4: 4 at once, the 5th waits one interval (250 ms), the 6th is told to queue behind it.
    expect(run(4, [0, 0, 0, 0, 0, 0])).toEqual([0, 0, 0, 0, 250_000, 500_000]);
  });

  it('a refused send that comes back at its time gets its token', () => {
    // rate 2: 2 at once; the 3rd waits 500 ms and is sent then; the 4th then waits another 500 ms.
    expect(run(2, [0, 0, 0, 500_000, 500_000])).toEqual([0, 0, 500_000, 0, 500_000]);
  });

  it('refills at the rate up to the burst, never beyond it', () => {
    // rate 2, an idle 10 s: the bucket holds 2 again, not 20.
    expect(run(2, [0, 0, 10_000_000, 10_000_000, 10_000_000])).toEqual([0, 0, 0, 0, 500_000]);
    // half a bucket back after half a second at rate 4: 2 tokens.
    expect(run(4, [0, 0, 0, 0, 500_000, 500_000, 500_000])).toEqual([0, 0, 0, 0, 0, 0, 250_000]);
  });

  it('rate 1 has no burst beyond one send; a fresh send may take a token before the line of refusals', () => {
    // The 3rd asks just before the 2nd's token and queues behind it; the 4th asks when a token is there and takes it.
    expect(run(1, [0, 0, 999_999, 1_000_000])).toEqual([0, 1_000_000, 1_000_001, 0]);
  });

  it('never sends more than burst + rate × W in a window of W (here: any second, from a full bucket, is ≤ 2 × rate)', () => {
    const rate = 20;
    let state: BucketState | undefined;
    const sentAt: number[] = [];
    // Someone asks every millisecond for 5 s.
    for (let t = 0; t < 5_000_000; t += 1_000) {
      const take = takeSendToken(state, rate, T0 + t, 0.5);
      state = take.state;
      if (take.sent) sentAt.push(t);
    }
    const inWindow = (fromUs: number, lengthUs: number) => sentAt.filter((t) => t >= fromUs && t < fromUs + lengthUs).length;
    // The burst: the first 20 asks, one a millisecond, are all sent; then one every 50 ms.
    expect(sentAt.slice(0, rate + 2)).toEqual([...Array.from({ length: rate }, (_, i) => i * 1_000), 50_000, 100_000]);
    expect(inWindow(0, 1_000_000)).toBe(2 * rate - 1);
    for (const t of sentAt) expect(inWindow(t, 1_000_000)).toBeLessThanOrEqual(2 * rate);
    // Once the burst is spent: exactly one per interval, so `rate` in every second.
    for (const t of sentAt.filter((t) => t >= 1_000_000 && t < 4_000_000)) expect(inWindow(t, 1_000_000)).toBe(rate);
    expect(sentAt.length).toBe(rate + 5 * rate - 1);
  });

  it('refusals queue behind each other up to the horizon, then spread over its second half', () => {
    const rate = 1;
    const answers = run(
      rate,
      Array.from({ length: 13 }, () => 0),
      0,
    );
    // 1 sent; the next 10 go in line 1 s apart (up to the 10 s horizon); the rest at half the horizon (random 0).
    expect(answers).toEqual([
      0, 1_000_000, 2_000_000, 3_000_000, 4_000_000, 5_000_000, 6_000_000, 7_000_000, 8_000_000, 9_000_000, 5_000_000, 5_000_000, 5_000_000,
    ]);
    expect(run(rate, [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0.999_999).at(-1)).toBe(Math.floor(DEFER_HORIZON_US / 2 + (0.999_999 * DEFER_HORIZON_US) / 2));
  });

  it('the line of refusals starts over once it has passed', () => {
    // rate 2: the 3rd waits 500 ms; a refusal 5 s later waits only for its own token.
    expect(run(2, [0, 0, 0, 5_000_000, 5_000_000, 5_000_000])).toEqual([0, 0, 500_000, 0, 0, 500_000]);
  });
});
