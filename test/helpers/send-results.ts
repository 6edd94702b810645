import type { SendResult } from '../../src/delivery/outbound/http-sender.js';
import type { AttemptErrorClass } from '../../src/domain/delivery.js';

/** A receiver's answer with `status` (and a Retry-After header when given), as the sender reports it. */
export const response = (status: number, retryAfter?: string): SendResult => ({
  kind: 'response',
  status,
  retryAfter,
  bodySnippet: '',
  durationMs: 12,
});

/** A request that got no answer, for the reason `errorClass` names. */
export const failure = (errorClass: AttemptErrorClass): SendResult => ({
  kind: 'error',
  errorClass,
  message: 'x',
  durationMs: 12,
});
