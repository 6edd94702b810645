import { z } from 'zod';

const TASK_STATUSES = ['pending', 'in_progress', 'success', 'failed'] as const;

export const taskSchema = z
  .object({
    task_id: z.uuid({ message: 'task_id must be a UUID' }).describe('Unique identifier of the task (UUID).'),
    status: z.enum(TASK_STATUSES).describe('pending, in_progress, success or failed; success and failed are terminal.'),
    fail_reason: z.string().max(4096).nullable().describe('Why the task failed; null unless status is failed.'),
    progress: z
      .object({
        total: z.number().int().min(0).describe('Dead letters the replay found when it started.'),
        done: z
          .number()
          .int()
          .min(0)
          .describe('Of those, how many it has handled: queued again, or dropped because their record had expired.'),
        queued: z.number().int().min(0).optional().describe('Replays queued (each a new delivery).'),
        delivered: z.number().int().min(0).optional().describe('Replays delivered.'),
        failed: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('Replays that failed again (dead letters once more, or dropped with their webhook).'),
        pending: z
          .number()
          .int()
          .min(0)
          .optional()
          .describe('Replays queued and not yet finished (waiting, in flight or retrying).'),
        cancelled: z
          .literal(true)
          .optional()
          .describe(
            'Present once the replay was cancelled: it queues no more; the task ends when the queued ones have outcomes.',
          ),
      })
      .optional()
      .describe(
        'For the engine’s own long operations (bulk replay). The task ends when every replay has an outcome: success when all ' +
          'were delivered, failed (fail_reason says how many) when some failed again.',
      ),
  })
  .meta({ id: 'Task' });

export type Task = z.infer<typeof taskSchema>;

export function isTerminalTask(task: Task): boolean {
  return task.status === 'success' || task.status === 'failed';
}
