import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Field names blanked out at the top of a log object and one level below it: secrets, keys, credentials. */
const SECRET_FIELDS = new Set(['secret', 'apiKey', 'secretKey']);
/** Blanked out at the top only: `key` is also an ordinary word one level down (a filter's key, a header map's). */
const TOP_SECRET_FIELDS = new Set(['key']);
/** Header names blanked out in `headers` and `req.headers`. */
const SECRET_HEADERS = ['x-api-key', 'authorization', 'cookie'];
const CENSOR = '[redacted]';

/** `headers` with the credential headers blanked out; the same object when it has none. */
function redactHeaders(headers: unknown): unknown {
  if (typeof headers !== 'object' || headers === null) return headers;
  const record = headers as Record<string, unknown>;
  if (!SECRET_HEADERS.some((name) => record[name] !== undefined)) return headers;
  const copy = { ...record };
  for (const name of SECRET_HEADERS) if (copy[name] !== undefined) copy[name] = CENSOR;
  return copy;
}

/**
 * A log object with every secret blanked out: `secret`, `apiKey`, `secretKey` and `key` at the top,
 * `secret`, `apiKey` and `secretKey` in any object one level down, and the credential headers of
 * `headers` and `req.headers`. It copies only what it changes, so the common line (ids, outcomes,
 * durations) costs a scan of its field names; pino's path-based redaction with wildcards cloned and
 * serialised every field of every line, the largest cost of a delivery attempt's log line.
 */
export function redactLogObject(object: Record<string, unknown>): Record<string, unknown> {
  let out: Record<string, unknown> | undefined;
  const set = (name: string, value: unknown) => {
    out ??= { ...object };
    out[name] = value;
  };
  for (const name in object) {
    const value = object[name];
    if (value === undefined || value === null) continue;
    if (SECRET_FIELDS.has(name) || TOP_SECRET_FIELDS.has(name)) {
      set(name, CENSOR);
      continue;
    }
    if (typeof value !== 'object' || Array.isArray(value) || value instanceof Error) continue;
    const inner = value as Record<string, unknown>;
    let innerCopy: Record<string, unknown> | undefined;
    for (const field of SECRET_FIELDS) {
      if (inner[field] === undefined) continue;
      innerCopy ??= { ...inner };
      innerCopy[field] = CENSOR;
    }
    if (name === 'headers') {
      const headers = redactHeaders(innerCopy ?? inner);
      if (headers !== inner) set(name, headers);
      continue;
    }
    if (name === 'req' && inner.headers !== undefined) {
      const headers = redactHeaders(inner.headers);
      if (headers !== inner.headers) {
        innerCopy ??= { ...inner };
        innerCopy.headers = headers;
      }
    }
    if (innerCopy !== undefined) set(name, innerCopy);
  }
  return out ?? object;
}

/** Query parameter names kept in logged URLs: short, plain names (a long one may be a key itself). */
const LOGGED_QUERY_NAME_RE = /^[A-Za-z0-9_.-]{1,32}$/;

/**
 * `url` (a request target: path and query) as it may be logged: every query value, and any name that
 * is not a short plain word, replaced by `[redacted]`, so no credential a client puts in a URL
 * (`?api_key=…`) reaches the logs. `/a?api_key=hk_x&page=2` → `/a?api_key=[redacted]&page=[redacted]`.
 */
export function urlForLog(url: string): string {
  const queryAt = url.indexOf('?');
  if (queryAt === -1) return url;
  const names = url
    .slice(queryAt + 1)
    .split('&')
    .filter((pair) => pair !== '')
    .map((pair) => {
      const name = pair.split('=', 1)[0] ?? '';
      return `${LOGGED_QUERY_NAME_RE.test(name) ? name : '[redacted]'}=[redacted]`;
    });
  const path = url.slice(0, queryAt);
  return names.length === 0 ? path : `${path}?${names.join('&')}`;
}

export interface LoggerOptions {
  level: string;
  format: 'auto' | 'json' | 'pretty';
  /** File descriptor the lines go to: 1 for servers, 2 for commands whose stdout is their result. */
  fd: 1 | 2;
  /** Tests pass a stream to capture JSON lines; it wins over `fd` and `format`. */
  destination?: NodeJS.WritableStream;
}

/** Log bytes gathered before a write, and the longest a line waits for its write. */
const LOG_BUFFER_BYTES = 8 * 1024;
const LOG_FLUSH_MS = 100;

/** The one pino logger of a process, with Hookline's redaction rules. */
export function createLogger(options: LoggerOptions): Logger {
  const base = { level: options.level, formatters: { log: redactLogObject } };
  if (options.destination) return pino(base, options.destination);
  const tty = options.fd === 1 ? process.stdout.isTTY : process.stderr.isTTY;
  if (options.format === 'pretty' || (options.format === 'auto' && tty)) {
    return pino({
      ...base,
      // One line per record, as in JSON: pino-pretty otherwise puts every field on a line of its own
      // (an attempt's line became twelve).
      transport: {
        target: 'pino-pretty',
        options: { destination: options.fd, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true },
      },
    });
  }
  // Lines are written in chunks of LOG_BUFFER_BYTES, not one write each (a busy worker logs thousands
  // a second), and at least every LOG_FLUSH_MS; pino writes what is left when the process exits.
  const destination = pino.destination({ dest: options.fd, minLength: LOG_BUFFER_BYTES, sync: false });
  setInterval(() => {
    try {
      destination.flush();
    } catch {
      // Closed: nothing left to write.
    }
  }, LOG_FLUSH_MS).unref();
  return pino(base, destination);
}
