import { Writable } from 'node:stream';
import { pino } from 'pino';

/**
 * Log lines a test asserts on: each `logger()` writes JSON lines at info and up, parsed, into
 * `lines` (shared by every logger it made); `clear()` empties it between tests.
 */
export function capturedLogs(): { lines: Record<string, unknown>[]; logger: () => pino.Logger; clear: () => void } {
  const lines: Record<string, unknown>[] = [];
  return {
    lines,
    logger: () =>
      pino(
        { level: 'info' },
        new Writable({
          write(chunk: Buffer, _encoding, done) {
            for (const line of chunk.toString('utf8').split('\n').filter(Boolean))
              lines.push(JSON.parse(line) as Record<string, unknown>);
            done();
          },
        }),
      ),
    clear: () => void (lines.length = 0),
  };
}
