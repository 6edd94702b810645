import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Paths pino blanks out wherever they appear in a log object: keys, secrets, credentials. */
const REDACT_PATHS = [
  'req.headers["x-api-key"]',
  'req.headers.authorization',
  'req.headers.cookie',
  'headers["x-api-key"]',
  'headers.authorization',
  'secret',
  '*.secret',
  'apiKey',
  '*.apiKey',
  'key',
  'secretKey',
  '*.secretKey',
];

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

/** The one pino logger of a process, with Hookline's redaction rules. */
export function createLogger(options: LoggerOptions): Logger {
  const base = { level: options.level, redact: { paths: REDACT_PATHS, censor: '[redacted]' } };
  if (options.destination) return pino(base, options.destination);
  const tty = options.fd === 1 ? process.stdout.isTTY : process.stderr.isTTY;
  if (options.format === 'pretty' || (options.format === 'auto' && tty)) {
    return pino({
      ...base,
      // One line per record, as in JSON: pino-pretty otherwise puts every field on a line of its own
      // (an attempt's line became twelve).
      transport: { target: 'pino-pretty', options: { destination: options.fd, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname', singleLine: true } },
    });
  }
  return pino(base, pino.destination(options.fd));
}
