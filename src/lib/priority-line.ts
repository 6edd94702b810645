/**
 * Puts a high-priority `item` in `line` behind the high-priority ones already there and ahead of
 * the first normal one (`isNormal`): each class keeps its arrival order. The endpoint's room
 * waiters and its deferred deliveries line up this way.
 */
export function enterAhead<T>(line: T[], item: T, isNormal: (queued: T) => boolean): void {
  const first = line.findIndex(isNormal);
  line.splice(first === -1 ? line.length : first, 0, item);
}
