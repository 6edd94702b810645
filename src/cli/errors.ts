import { CommanderError } from 'commander';
import { ConfigError, type Config } from '../config/env.js';
import { EmbeddedRedisError, NoEngineDataError } from '../embedded/defaults.js';
import { RedisServerUnavailableError } from '../embedded/redis-server.js';

/** An error whose message is the whole story for the user: printed as `hookline: <message>`, without a stack trace; exit 1. */
export class CliError extends Error {
  readonly exitCode: number = 1;
}

/** Wrong use of a command (a bad option value, an unknown id): exit 2, as for Commander's own usage errors. */
export class UsageError extends CliError {
  override readonly exitCode = 2;
}

const REASONS: [RegExp, string][] = [
  [/ECONNREFUSED/, 'connection refused'],
  [/ENOTFOUND|EAI_AGAIN/, 'host not found'],
  [/ETIMEDOUT/, 'connection timed out'],
  [/ECONNRESET|EPIPE/, 'connection reset'],
  [/EHOSTUNREACH|ENETUNREACH/, 'host unreachable'],
  [/WRONGPASS|NOAUTH|invalid password|invalid username-password/i, 'authentication failed'],
  // What a cluster says of a seed node it could not connect to.
  [/Connection is closed/, 'connection closed'],
];

/** Why a Redis connection failed, in a few words: `connection refused`, `authentication failed`, … */
export function redisFailureReason(error: Error): string {
  // A cluster's error wraps the last node's.
  const cause = (error as Error & { lastNodeError?: Error }).lastNodeError ?? error;
  const text = `${(cause as NodeJS.ErrnoException).code ?? ''} ${cause.message}`;
  return REASONS.find(([pattern]) => pattern.test(text))?.[1] ?? (cause.message.split('\n')[0] || cause.name);
}

/**
 * What a serving process says when it cannot listen (a port another process holds, a host that is
 * not this machine's): one sentence naming the address and the variable to change. Other errors
 * come back as they are.
 */
export function listenFailure(error: unknown, config: Pick<Config, 'apiHost' | 'apiPort' | 'metricsPort'>): unknown {
  const { code, address, port } = error as NodeJS.ErrnoException & { address?: string; port?: number };
  const variable =
    port === config.metricsPort && port !== config.apiPort ? 'HOOKLINE_METRICS_PORT' : 'HOOKLINE_API_PORT';
  const where = `${address ?? config.apiHost}:${port ?? config.apiPort}`;
  if (code === 'EADDRINUSE')
    return new CliError(
      `cannot listen on ${where}: another process holds the port; stop it, or set ${variable} to a free port`,
    );
  if (code === 'EACCES')
    return new CliError(`cannot listen on ${where}: this user may not open the port; set ${variable} to 1024 or above`);
  if (code === 'EADDRNOTAVAIL')
    return new CliError(
      `cannot listen on ${where}: not an address of this machine; set HOOKLINE_API_HOST to one that is`,
    );
  return error;
}

/**
 * What a command that threw ends with: its exit code, and the line to print (`undefined` when
 * Commander printed it already). Expected failures are one plain sentence; a bug keeps its stack.
 */
export function failure(error: unknown): { exitCode: number; message: string | undefined } {
  // Commander has printed its message (and the help); --help and --version end here too.
  if (error instanceof CommanderError) return { exitCode: error.exitCode === 0 ? 0 : 2, message: undefined };
  if (error instanceof CliError) return { exitCode: error.exitCode, message: error.message };
  if (
    error instanceof ConfigError ||
    error instanceof RedisServerUnavailableError ||
    error instanceof NoEngineDataError ||
    error instanceof EmbeddedRedisError
  ) {
    return { exitCode: 1, message: error.message };
  }
  return { exitCode: 1, message: error instanceof Error ? (error.stack ?? error.message) : String(error) };
}
