import { agentStatusSchema, isTerminalAgentStatus, type AgentStatus } from '../domain/agent.js';
import { isTerminalTask, taskSchema, type Task } from '../domain/task.js';
import type { RedisKeys } from './keys.js';
import type { Redis } from './redis.js';
import { RedisVersionedDocStore, type DocLookup, type DocWriter } from './versioned-docs.js';

/** Finished tasks and stopped or failed deployments are kept this long after their last update. */
const FINAL_STATE_RETENTION_MS = 30 * 24 * 3_600_000;

export type TaskStore = DocLookup<Task> & DocWriter<Task>;
export type AgentStatusStore = DocLookup<AgentStatus> & DocWriter<AgentStatus>;

export function createTaskStore(redis: Redis, keys: RedisKeys): TaskStore {
  return new RedisVersionedDocStore(redis, {
    schema: taskSchema,
    key: keys.task,
    idOf: (task) => task.task_id,
    isFinal: isTerminalTask,
    finalRetentionMs: FINAL_STATE_RETENTION_MS,
  });
}

export function createAgentStatusStore(redis: Redis, keys: RedisKeys): AgentStatusStore {
  return new RedisVersionedDocStore(redis, {
    schema: agentStatusSchema,
    key: keys.agent,
    idOf: (agent) => agent.deployment_id,
    isFinal: isTerminalAgentStatus,
    finalRetentionMs: FINAL_STATE_RETENTION_MS,
  });
}
