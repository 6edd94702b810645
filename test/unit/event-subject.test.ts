import { describe, expect, it } from 'vitest';
import { eventSubjectOf } from '../../src/domain/event-subject.js';

const envelope = (data: unknown) =>
  JSON.stringify({ version: '1.0', event_id: 'e', event_type: 'EVENT_TYPE_MACHINE_CREATED', timestamp: 't', data });

describe('eventSubjectOf (the machine and deployment a delivery log row names)', () => {
  it.each([
    ['a machine event', { status: 'available', metadata: { machine_id: 'm-7f3a21' } }, 'm-7f3a21', undefined],
    [
      'a deployment event (its own metadata does not count)',
      { deployment_id: 'dep-5c81e0', machine_id: 'm-7f3a21', metadata: { machine_id: 'other' } },
      'm-7f3a21',
      'dep-5c81e0',
    ],
    ['a removal naming only the machine', { metadata: { machine_id: 'm-1' } }, 'm-1', undefined],
    ['a test event', { test: true, message: 'A test event' }, undefined, undefined],
    [
      'ids that are not ids',
      { machine_id: 7, deployment_id: 'has space', metadata: { machine_id: null } },
      undefined,
      undefined,
    ],
    ['an id too long to be one', { machine_id: 'm'.repeat(129) }, undefined, undefined],
    ['data that is no object', ['m-1'], undefined, undefined],
  ])('%s', (_, data, machineId, deploymentId) =>
    expect(eventSubjectOf(envelope(data))).toEqual({ machineId, deploymentId }),
  );

  it.each([undefined, '', 'not json', '"a string"', 'null'])('names nothing for the body %j', (body) =>
    expect(eventSubjectOf(body)).toEqual({ machineId: undefined, deploymentId: undefined }),
  );
});
