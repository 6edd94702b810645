import { z } from 'zod';
import { externalIdSchema } from './ids.js';

const AGENT_STATUSES = [
  'STATUS_UNSPECIFIED',
  'STATUS_PENDING',
  'STATUS_STOPPING',
  'STATUS_STOPPED',
  'STATUS_FAILED',
  'STATUS_RUNNING',
] as const;

export const agentStatusSchema = z
  .object({
    deployment_id: externalIdSchema.describe('Identifier of the deployment.'),
    machine_id: externalIdSchema.describe('Identifier of the machine on which the agent runs.'),
    status: z.enum(AGENT_STATUSES),
    fail_reason: z.string().max(4096).default('').describe('Reason for failure; empty string when there is none.'),
    metadata: z
      .record(z.string().max(256), z.string().max(4096))
      .refine((m) => Object.keys(m).length <= 64, 'metadata holds at most 64 entries')
      .default({})
      .describe('Additional key-value information about the deployment.'),
  })
  .meta({ id: 'AgentDeploymentStatus' });

export type AgentStatus = z.infer<typeof agentStatusSchema>;

export function isTerminalAgentStatus(agent: AgentStatus): boolean {
  return agent.status === 'STATUS_STOPPED' || agent.status === 'STATUS_FAILED';
}
