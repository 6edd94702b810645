import { pino, type Logger } from 'pino';

export type { Logger } from 'pino';

/** Paths pino blanks out wherever they appear in a log object: keys, secrets, credentials. */
export const REDACT_PATHS = [
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
      transport: { target: 'pino-pretty', options: { destination: options.fd, translateTime: 'SYS:HH:MM:ss.l', ignore: 'pid,hostname' } },
    });
  }
  return pino(base, pino.destination(options.fd));
}
