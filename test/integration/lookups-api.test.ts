import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';

const TASK_ID = '9b2e4c1a-7d3f-4e8a-b6c5-1f0a2d3e4b5c';

describe('GET /rental/v1/tasks/{task_id}', () => {
  let t: TestApp;
  let key: string;
  beforeEach(async () => {
    t = await testApp();
    key = await t.keyFor(['tasks:read']);
  });
  afterEach(async () => t.close());
  const get = (id: string) =>
    t.app.inject({ method: 'GET', url: `/rental/v1/tasks/${id}`, headers: { 'x-api-key': key } });

  it('answers a task in each status, with fail_reason only for failed', async () => {
    await t.tasks.put({ task_id: TASK_ID, status: 'success', fail_reason: null }, 1);
    expect((await get(TASK_ID)).json()).toEqual({ task_id: TASK_ID, status: 'success', fail_reason: null });
    await t.tasks.put({ task_id: TASK_ID, status: 'failed', fail_reason: 'disk full' }, 2);
    expect((await get(TASK_ID)).json()).toEqual({ task_id: TASK_ID, status: 'failed', fail_reason: 'disk full' });
    await t.tasks.put({ task_id: TASK_ID, status: 'pending', fail_reason: 'ignored' }, 3);
    expect((await get(TASK_ID)).json()).toEqual({ task_id: TASK_ID, status: 'pending', fail_reason: null });
    expect((await get(TASK_ID.toUpperCase())).json<{ task_id: string }>().task_id).toBe(TASK_ID);
  });

  it('keeps the newer state when an older write arrives late, and expires finished tasks', async () => {
    expect(await t.tasks.put({ task_id: TASK_ID, status: 'success', fail_reason: null }, 2000)).toBe('applied');
    expect(await t.tasks.put({ task_id: TASK_ID, status: 'in_progress', fail_reason: null }, 1000)).toBe('stale');
    expect((await get(TASK_ID)).json<{ status: string }>().status).toBe('success');
    expect(await t.redis.pttl(t.keys.task(TASK_ID))).toBeGreaterThan(0);
  });

  it('answers 400 Invalid task_id format for a malformed id', async () => {
    for (const bad of ['abc', '123', `${TASK_ID}x`, 'not%20a%20uuid']) {
      const res = await get(bad);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ error: 'Invalid task_id format', code: 'invalid_task_id' });
    }
  });

  it('answers 404 Task not found for an unknown id', async () => {
    const res = await get(TASK_ID);
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'Task not found', code: 'task_not_found' });
  });
});

describe('GET /rental/v1/machines/agents/{deployment_id}', () => {
  let t: TestApp;
  let key: string;
  beforeEach(async () => {
    t = await testApp();
    key = await t.keyFor(['agents:read']);
  });
  afterEach(async () => t.close());
  const get = (id: string) =>
    t.app.inject({ method: 'GET', url: `/rental/v1/machines/agents/${id}`, headers: { 'x-api-key': key } });

  it('answers the agent deployment status', async () => {
    const agent = {
      deployment_id: 'dep-42',
      machine_id: 'm-7',
      status: 'STATUS_RUNNING' as const,
      fail_reason: '',
      metadata: { region: 'eu', image: 'vllm:1' },
    };
    await t.agents.put(agent, 10);
    const res = await get('dep-42');
    expect(res.statusCode).toBe(200);
    expect(res.json()).toEqual(agent);
  });

  it('ignores an older status arriving after a newer one', async () => {
    await t.agents.put(
      { deployment_id: 'dep-1', machine_id: 'm-1', status: 'STATUS_STOPPED', fail_reason: '', metadata: {} },
      200,
    );
    expect(
      await t.agents.put(
        { deployment_id: 'dep-1', machine_id: 'm-1', status: 'STATUS_RUNNING', fail_reason: '', metadata: {} },
        100,
      ),
    ).toBe('stale');
    expect((await get('dep-1')).json<{ status: string }>().status).toBe('STATUS_STOPPED');
  });

  it('answers 400 for a missing or malformed deployment id', async () => {
    const missing = await get('');
    expect(missing.statusCode).toBe(400);
    expect(missing.json()).toEqual({ error: 'deployment_id is required', code: 'invalid_deployment_id' });
    for (const bad of ['has%20space', '-leading-dash', 'x'.repeat(129), 'semi;colon']) {
      const res = await get(bad);
      expect(res.statusCode).toBe(400);
      expect(res.json()).toEqual({ error: 'Invalid deployment_id format', code: 'invalid_deployment_id' });
    }
  });

  it('answers 404 for an unknown deployment', async () => {
    const res = await get('dep-unknown');
    expect(res.statusCode).toBe(404);
    expect(res.json()).toEqual({ error: 'Deployment not found', code: 'deployment_not_found' });
  });
});
