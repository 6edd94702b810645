/**
 * The queue signals: how the processors speak BullMQ's language. Expected outcomes travel as values
 * until the last step of a processor turns them into one of these (or into a DelayedError after
 * moveToDelayed); the worker recognises them with instanceof.
 */

/** Thrown to make BullMQ retry after exactly `delayMs` (read by the queue's backoff strategy). */
export class RetryLaterError extends Error {
  override name = 'RetryLaterError';
  constructor(
    readonly delayMs: number,
    outcome: string,
  ) {
    super(`attempt failed (${outcome}); retrying in ${delayMs} ms`);
  }
}

/**
 * Thrown by a batch that stopped sending because storage failed: its job runs again, and the re-run
 * sends only what was not recorded.
 */
export class StorageUnavailableError extends Error {
  override name = 'StorageUnavailableError';
  constructor() {
    super('storage failed during the batch; it runs again and sends only what was not recorded');
  }
}

/** BullMQ backoff strategy: the delay our own decision chose, or 5 s after an unexpected error. */
export function backoffFromError(_attemptsMade: number, _type?: string, error?: Error): number {
  return error instanceof RetryLaterError ? error.delayMs : 5_000;
}
