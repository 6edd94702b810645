import type { ApiKeyRecord } from '../store/api-keys.js';

/**
 * What `--json` prints: `value` as indented JSON on stdout. Values are shaped as the admin API
 * shapes the same records (snake_case names, ISO-8601 times), by the API's own serializers where
 * it has one.
 */
export function printJson(value: unknown): void {
  process.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

/** A note for the person at the terminal (`no dead letters`, progress): stderr, so that stdout stays the result. */
export function say(line: string): void {
  process.stderr.write(`${line}\n`);
}

/**
 * What a listing prints without `--json`: a header of column names, then a line per row on stdout,
 * each column as wide as its widest cell (the last one unpadded).
 */
export function printTable(header: readonly string[], rows: readonly (readonly string[])[]): void {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  for (const row of [header, ...rows])
    process.stdout.write(
      `${row.map((cell, i) => (i === row.length - 1 ? cell : cell.padEnd(widths[i]!))).join('  ')}\n`,
    );
}

/** An API key as `--json` shows it, named as the API names its resources; never the key itself. */
export function toApiKeyResource(record: ApiKeyRecord) {
  return {
    key_id: record.id,
    name: record.name,
    vendor_id: record.vendorId ?? null,
    roles: record.roles,
    created_at: record.createdAt,
  };
}

/**
 * Ends the process quietly when whoever reads stdout stops reading (`hookline keys list | head
 * -1`): Node reports that as an EPIPE error on stdout, which would otherwise end in a stack trace.
 */
export function exitQuietlyWhenStdoutCloses(): void {
  process.stdout.on('error', (error: NodeJS.ErrnoException) => {
    if (error.code !== 'EPIPE') throw error;
    process.exit(process.exitCode ?? 0);
  });
}
