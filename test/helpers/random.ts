/** A small deterministic random source (numbers in [0, 1)), so tests built on it see the same numbers on every run. */
export function lcg(seed: number): () => number {
  let state = seed;
  return () => {
    state = (state * 1_103_515_245 + 12_345) % 2 ** 31;
    return state / 2 ** 31;
  };
}
