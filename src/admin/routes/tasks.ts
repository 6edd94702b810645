import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { isUuid } from '../../domain/ids.js';
import { hasRole } from '../../domain/roles.js';
import { taskSchema, type Task } from '../../domain/task.js';
import type { ReplayTaskView } from '../../store/replay-tasks.js';
import { principalOf, type Authorizer } from '../auth.js';
import { ApiError } from '../errors.js';
import type { Logger } from '../../logger.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

/** Tasks as the route reads them: bulk replays with their outcomes counted, and who started them. */
export interface TaskReader {
  view(taskId: string): Promise<ReplayTaskView | undefined>;
  /** `vendorId` undefined: any vendor's task (an operator's cancel). */
  cancel(taskId: string, vendorId: string | undefined): Promise<'cancelled' | 'not_found' | 'finished'>;
}

/**
 * `GET /rental/v1/tasks/{task_id}`: any task with role tasks:read; a vendor key reads the tasks it
 * started (bulk replays of its webhooks), and another vendor's task is "not found" to it.
 */
export function taskRoutes(deps: { authorize: Authorizer; tasks: TaskReader; logger: Logger }): FastifyPluginAsyncZod {
  /** Cancels and answers the task as it stands; 404 and 409 as the routes say. */
  const cancel = async (taskId: string, vendorId: string | undefined): Promise<Task> => {
    if (!isUuid(taskId)) throw new ApiError('invalid_task_id');
    const id = taskId.toLowerCase();
    const outcome = await deps.tasks.cancel(id, vendorId);
    if (outcome === 'not_found') throw new ApiError('task_not_found');
    if (outcome === 'finished') throw new ApiError('task_finished');
    const found = await deps.tasks.view(id);
    if (found === undefined) throw new ApiError('task_not_found');
    return shown(found.task);
  };

  return async (app) => {
    app.get(
      '/rental/v1/tasks/:task_id',
      {
        onRequest: deps.authorize(['tasks:read', 'vendor'], { portal: 'read' }),
        schema: {
          tags: ['rental'],
          summary: 'Get a task',
          description:
            'Poll until status is success or failed. task_id must be a UUID. A key with tasks:read reads any task; a vendor key ' +
            'reads the bulk replays of its own webhooks. A bulk replay ends when every replayed delivery has an outcome: success ' +
            'when all were delivered, failed (fail_reason says how many) when some failed again; progress counts them.',
          params: z.object({ task_id: z.string().describe('Task id (UUID).') }),
          querystring: noQueryParameters,
          response: { 200: taskSchema, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request) => {
        const { task_id: taskId } = request.params;
        if (!isUuid(taskId)) throw new ApiError('invalid_task_id');
        const found = await deps.tasks.view(taskId.toLowerCase());
        const principal = principalOf(request);
        // A vendor key that may not read every task sees only its own, and no hint that others exist.
        const mayRead =
          found !== undefined &&
          (hasRole(principal, 'tasks:read') || (found.vendorId !== undefined && found.vendorId === principal.vendorId));
        if (!mayRead) throw new ApiError('task_not_found');
        return shown(found.task);
      },
    );

    app.post(
      '/vendors/v1/tasks/:task_id/cancel',
      {
        onRequest: deps.authorize('vendor', { portal: 'replay' }),
        schema: {
          tags: ['webhooks'],
          summary: 'Cancel a bulk replay',
          description:
            'Stops one of the vendor’s bulk replays before its next page (of 100 dead letters): replays already queued stay ' +
            'queued and are delivered, the dead letters not reached stay dead letters (a new bulk replay takes them). Answers 202 ' +
            'with the task as GET /rental/v1/tasks/{task_id} shows it; the task ends as failed, its fail_reason saying it was ' +
            'cancelled and how many were replayed, once the queued replays have outcomes. Another vendor’s task, or a task that is ' +
            'no bulk replay, answers 404; one that has ended answers 409.',
          params: z.object({ task_id: z.string().describe('Task id (UUID) of the bulk replay.') }),
          querystring: noQueryParameters,
          response: { 202: taskSchema, ...errorResponses(400, 401, 403, 404, 409, 500) },
        },
      },
      async (request, reply) => {
        const vendorId = principalOf(request).vendorId;
        // A vendor key always has a vendor (the role requires one); never "any vendor" here.
        if (vendorId === undefined) throw new ApiError('task_not_found');
        return reply.code(202).send(await cancel(request.params.task_id, vendorId));
      },
    );

    app.post(
      '/admin/v1/tasks/:task_id/cancel',
      {
        onRequest: deps.authorize('admin'),
        schema: {
          tags: ['operator'],
          summary: 'Cancel any vendor’s bulk replay',
          description:
            'As POST /vendors/v1/tasks/{task_id}/cancel, for a bulk replay of any vendor’s webhook. Logged with the key ' +
            '(operator.replay_cancelled).',
          params: z.object({ task_id: z.string().describe('Task id (UUID) of the bulk replay.') }),
          querystring: noQueryParameters,
          response: { 202: taskSchema, ...errorResponses(400, 401, 403, 404, 409, 500) },
        },
      },
      async (request, reply) => {
        const task = await cancel(request.params.task_id, undefined);
        const { keyId, name } = principalOf(request);
        deps.logger.info(
          { event: 'operator.replay_cancelled', keyId, keyName: name, taskId: task.task_id },
          'an operator cancelled a bulk replay',
        );
        return reply.code(202).send(task);
      },
    );
  };
}

/** A task as answered: fail_reason only on a failed one. */
function shown(task: Task): Task {
  return { ...task, fail_reason: task.status === 'failed' ? task.fail_reason : null };
}
