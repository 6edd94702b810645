import { z } from 'zod';

const TASK_STATUSES = ['pending', 'in_progress', 'success', 'failed'] as const;

export const taskSchema = z
  .object({
    task_id: z.uuid({ message: 'task_id must be a UUID' }).describe('Unique identifier of the task (UUID).'),
    status: z.enum(TASK_STATUSES).describe('pending, in_progress, success or failed; success and failed are terminal.'),
    fail_reason: z.string().max(4096).nullable().describe('Why the task failed; null unless status is failed.'),
    progress: z
      .object({ total: z.number().int().min(0), done: z.number().int().min(0) })
      .optional()
      .describe('For the engine’s own long operations (bulk replay): items done out of total.'),
  })
  .meta({ id: 'Task' });

export type Task = z.infer<typeof taskSchema>;

export function isTerminalTask(task: Task): boolean {
  return task.status === 'success' || task.status === 'failed';
}
