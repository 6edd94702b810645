const UNIT_MS = { ms: 1, s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;
const DURATION_RE = /^(\d+(?:\.\d+)?)(ms|s|m|h|d)$/;

/** Parses `500ms`, `15s`, `5m`, `2h` or `1d` into milliseconds; returns undefined for anything else. */
export function parseDurationMs(text: string): number | undefined {
  const match = DURATION_RE.exec(text.trim());
  if (!match) return undefined;
  const ms = Number(match[1]) * UNIT_MS[match[2] as keyof typeof UNIT_MS];
  return Number.isFinite(ms) ? Math.round(ms) : undefined;
}

/** Writes milliseconds the way durations are configured: the largest whole unit (`300000` → `5m`, `1500` → `1500ms`). */
export function formatDurationMs(ms: number): string {
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    if (ms >= UNIT_MS[unit] && ms % UNIT_MS[unit] === 0) return `${ms / UNIT_MS[unit]}${unit}`;
  }
  return ms === 0 ? '0s' : `${ms}ms`;
}

/** Milliseconds for a person to read, every unit that is not zero: `272105000` → `3d 3h 35m 5s`. */
export function describeDurationMs(ms: number): string {
  const parts: string[] = [];
  let rest = Math.round(ms);
  for (const unit of ['d', 'h', 'm', 's'] as const) {
    const count = Math.floor(rest / UNIT_MS[unit]);
    if (count > 0) parts.push(`${count}${unit}`);
    rest -= count * UNIT_MS[unit];
  }
  if (rest > 0 || parts.length === 0) parts.push(`${rest}ms`);
  return parts.join(' ');
}
