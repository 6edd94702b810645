import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';
import { agentStatusSchema, type AgentStatus } from '../../domain/agent.js';
import { EXTERNAL_ID_RE } from '../../domain/ids.js';
import type { DocLookup } from '../../store/versioned-docs.js';
import type { Authorizer } from '../auth.js';
import { ApiError } from '../errors.js';
import { errorResponses, noQueryParameters } from '../schemas.js';

/** `GET /rental/v1/machines/agents/{deployment_id}` (role agents:read). */
export function agentRoutes(deps: { authorize: Authorizer; agents: DocLookup<AgentStatus> }): FastifyPluginAsyncZod {
  return async (app) => {
    app.get(
      '/rental/v1/machines/agents/:deployment_id',
      {
        onRequest: deps.authorize('agents:read'),
        schema: {
          tags: ['rental'],
          summary: 'Get the agent status of a deployment',
          description:
            'deployment_id: 1-128 characters of letters, digits and . _ : @ - (starting with a letter or digit).',
          params: z.object({ deployment_id: z.string().describe('Deployment id.') }),
          querystring: noQueryParameters,
          response: { 200: agentStatusSchema, ...errorResponses(400, 401, 403, 404, 500) },
        },
      },
      async (request) => {
        const { deployment_id: deploymentId } = request.params;
        if (!EXTERNAL_ID_RE.test(deploymentId)) {
          throw new ApiError(
            'invalid_deployment_id',
            deploymentId === '' ? 'deployment_id is required' : 'Invalid deployment_id format',
          );
        }
        const agent = await deps.agents.get(deploymentId);
        if (!agent) throw new ApiError('deployment_not_found');
        return agent;
      },
    );
  };
}
