import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { isUuid } from '../../domain/ids.js';
import { taskSchema, type Task } from '../../domain/task.js';
import type { DocLookup } from '../../store/versioned-docs.js';
import type { Authorizer } from '../auth.js';
import { ApiError } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

/** `GET /rental/v1/tasks/{task_id}` (role tasks:read). */
export function taskRoutes(deps: { authorize: Authorizer; tasks: DocLookup<Task> }): FastifyPluginAsyncZod {
  return async (app) => {
    app.get(
      '/rental/v1/tasks/:task_id',
      {
        onRequest: deps.authorize('tasks:read'),
        schema: {
          tags: ['rental'],
          summary: 'Get a task',
          description: 'Poll until status is success or failed. task_id must be a UUID.',
          params: z.object({ task_id: z.string().describe('Task id (UUID).') }),
          querystring: noQueryParameters,
          response: { 200: taskSchema, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request) => {
        const { task_id: taskId } = request.params;
        if (!isUuid(taskId)) throw new ApiError('invalid_task_id');
        const task = await deps.tasks.get(taskId.toLowerCase());
        if (!task) throw new ApiError('task_not_found');
        return { ...task, fail_reason: task.status === 'failed' ? task.fail_reason : null };
      },
    );
  };
}
