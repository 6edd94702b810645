import { valueAt } from './filter.js';
import { EXTERNAL_ID_RE } from './ids.js';

/**
 * What an event is about, as the delivery log names it beside the event id: the machine, and for a
 * deployment event the deployment. A vendor looking for "the delivery about machine m-7f3a21" can
 * tell the rows of one event type apart by it.
 *
 * Why it is read from the delivered body when the log is read, not recorded with each attempt: the
 * body is kept already (the event log, a dead letter's record), and reading a page of the log is
 * rare next to delivering; recording it would put a JSON parse on every delivery's first attempt.
 */
export interface EventSubject {
  /** `data.machine_id` (deployment events), else `data.metadata.machine_id` (machine events). */
  machineId: string | undefined;
  /** `data.deployment_id` (deployment events). */
  deploymentId: string | undefined;
}

const NO_SUBJECT: EventSubject = { machineId: undefined, deploymentId: undefined };

/** An id as producers send them (EXTERNAL_ID_RE), or undefined for anything else. */
function idAt(envelope: unknown, path: readonly string[]): string | undefined {
  const value = valueAt(envelope, path);
  return typeof value === 'string' && EXTERNAL_ID_RE.test(value) ? value : undefined;
}

/** The subject of the event a delivery carried, from its JSON body (the envelope); none when the body is missing or names none. Pure. */
export function eventSubjectOf(body: string | undefined): EventSubject {
  if (body === undefined) return NO_SUBJECT;
  let envelope: unknown;
  try {
    envelope = JSON.parse(body);
  } catch {
    return NO_SUBJECT;
  }
  return {
    // A deployment's own metadata is free-form: its machine_id field is the one that counts.
    machineId: idAt(envelope, ['data', 'machine_id']) ?? idAt(envelope, ['data', 'metadata', 'machine_id']),
    deploymentId: idAt(envelope, ['data', 'deployment_id']),
  };
}
