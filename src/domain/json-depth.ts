/**
 * How deeply a JSON value nests. JSON.parse reads any depth without recursing, but JSON.stringify
 * and every recursive walk overflow the stack at a few thousand levels: an event of 40 KB nested
 * 20,000 deep threw while its envelope was serialised and failed its whole batch. Inputs are
 * therefore measured here, with an explicit stack rather than recursion (which could overflow in
 * turn), before anything else walks them.
 */

/**
 * Whether `value` holds objects or arrays nested more than `levelsMax` deep, counting `value`
 * itself as level 1 (`{"a": []}` has two levels). Stops at the first node too deep, so it is cheap
 * on a hostile input and answers true for a cycle.
 */
export function nestsDeeperThan(value: unknown, levelsMax: number): boolean {
  if (typeof value !== 'object' || value === null) return false;
  const nodes: object[] = [value];
  const levels: number[] = [1];
  for (;;) {
    const node = nodes.pop();
    const level = levels.pop();
    if (node === undefined || level === undefined) return false;
    if (level > levelsMax) return true;
    // Indexed and for…in loops rather than Object.values: they allocate nothing, which halves the
    // cost on an ordinary event (about 1 µs).
    if (Array.isArray(node)) {
      for (let i = 0; i < node.length; i += 1) {
        const child: unknown = node[i];
        if (typeof child === 'object' && child !== null) {
          nodes.push(child);
          levels.push(level + 1);
        }
      }
    } else {
      for (const key in node) {
        const child = (node as Record<string, unknown>)[key];
        if (typeof child === 'object' && child !== null) {
          nodes.push(child);
          levels.push(level + 1);
        }
      }
    }
  }
}
