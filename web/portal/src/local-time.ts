/**
 * `datetime-local` inputs hold a wall-clock time without a zone ("2026-03-02T09:14"), meant in the
 * reader's zone, while the API takes ISO 8601 with one. These convert between the two through the
 * browser's own zone (the Date constructor's), so the page sends exactly the instant the reader chose.
 */

const LOCAL_RE = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d{1,3}))?)?$/;

const pad = (n: number) => String(n).padStart(2, '0');

/**
 * The UTC ISO 8601 time (`2026-03-02T08:14:00Z`) of a `datetime-local` value read in the browser's
 * zone; undefined for an empty or malformed value, or a date that does not exist (February 30th).
 * Across a daylight-saving change, a skipped wall-clock time is moved on by the change, and one that
 * happens twice is its first (the Date constructor's rules).
 */
export function isoFromLocal(local: string): string | undefined {
  const match = LOCAL_RE.exec(local);
  if (!match) return undefined;
  const part = (i: number) => Number(match[i] ?? 0);
  const [year, month, day, hours, minutes, seconds] = [part(1), part(2), part(3), part(4), part(5), part(6)];
  const ms = Number((match[7] ?? '').padEnd(3, '0'));
  if (hours > 23 || minutes > 59 || seconds > 59) return undefined;
  const date = new Date(year, month - 1, day, hours, minutes, seconds, ms);
  // The constructor rolls an impossible date over (February 30th → March 2nd): not what was typed.
  if (date.getFullYear() !== year || date.getMonth() !== month - 1 || date.getDate() !== day) return undefined;
  return date.toISOString().replace('.000Z', 'Z');
}

/** The `datetime-local` value (to the minute) of `ms` in the browser's zone: what such an input shows for it. */
export function localFromMs(ms: number): string {
  const d = new Date(ms);
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())}T${pad(d.getHours())}:${pad(d.getMinutes())}`;
}

/** The browser's time zone by name (`Europe/Berlin`), for the words next to such inputs; undefined where it has none. */
export function browserZone(): string | undefined {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || undefined;
}
