import { describe, expect, it } from 'vitest';
import { latestPerEntity, type ReadModelChange } from '../../src/domain/read-model-change.js';
import { decodeEntry, encodeChanges } from '../../src/store/read-model-feed.js';

const machine = (id: string, status = 'available') => ({ status, metadata: { machine_id: id } });
const upsert = (id: string, versionMs: number, status?: string): ReadModelChange => ({
  model: 'machine',
  kind: 'upsert',
  machine: machine(id, status),
  versionMs,
});
const remove = (id: string, versionMs: number): ReadModelChange => ({
  model: 'machine',
  kind: 'remove',
  machineId: id,
  versionMs,
});
const agent = (
  id: string,
  versionMs: number,
  status: 'STATUS_RUNNING' | 'STATUS_STOPPED' = 'STATUS_RUNNING',
): ReadModelChange => ({
  model: 'agent',
  doc: { deployment_id: id, machine_id: 'm-1', status, fail_reason: '', metadata: {} },
  versionMs,
});
const task = (id: string, versionMs: number): ReadModelChange => ({
  model: 'task',
  doc: { task_id: id, status: 'success', fail_reason: null },
  versionMs,
});

describe('latestPerEntity (what applying the changes one at a time leaves)', () => {
  it('keeps the greatest version of each entity, the later one among equal versions, in the kept changes’ order', () => {
    expect(latestPerEntity([upsert('m-1', 5, 'a'), upsert('m-1', 3, 'b'), upsert('m-1', 5, 'c')])).toEqual([
      upsert('m-1', 5, 'c'),
    ]);
    expect(latestPerEntity([upsert('m-1', 5), remove('m-1', 6), upsert('m-2', 1), upsert('m-1', 4)])).toEqual([
      remove('m-1', 6),
      upsert('m-2', 1),
    ]);
    expect(latestPerEntity([remove('m-1', 6), upsert('m-1', 5)])).toEqual([remove('m-1', 6)]);
  });

  it('keeps entities of different read models apart, even under one id', () => {
    const changes = [upsert('x-1', 1), agent('x-1', 1), task('x-1', 1), agent('x-1', 2, 'STATUS_STOPPED')];
    expect(latestPerEntity(changes)).toEqual([upsert('x-1', 1), task('x-1', 1), agent('x-1', 2, 'STATUS_STOPPED')]);
  });

  it('answers the changes as they are when no entity repeats', () => {
    const changes = [upsert('m-1', 1), agent('d-1', 1), task('t-1', 1)];
    expect(latestPerEntity(changes)).toEqual(changes);
  });
});

describe('the projection stream’s entries', () => {
  it('read back every kind of change as written, and negative event times too', () => {
    const changes = [
      upsert('m-1', -5),
      remove('m with spaces', 7),
      agent('d-1', 1),
      task('0b2e4c1a-7d3f-4e8a-b6c5-1f0a2d3e4b5c', 2),
    ];
    const fields = encodeChanges(changes).map((field) => Buffer.from(field));
    expect(decodeEntry(fields)).toEqual({ changes, problems: [] });
  });

  it('leave out, with a reason naming no content, what is not a change', () => {
    const fields = ['m', '1 {"status":"ok"}', 't', '1 nope', 'q', '1 {}', 'r', '1 ', 'a'].map((field) =>
      Buffer.from(field),
    );
    expect(decodeEntry(fields)).toEqual({
      changes: [],
      problems: [
        'the last field has no value',
        'field 0 (m): the document is not valid (at metadata)',
        'field 1 (t): the document is not valid JSON',
        'field 2 (q): not a kind of change',
        'field 3 (r): no machine id',
      ],
    });
    expect(decodeEntry(null).problems).toEqual(['the entry was deleted before it was projected']);
  });
});
