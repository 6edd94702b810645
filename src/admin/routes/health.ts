import type { FastifyPluginAsyncZod } from 'fastify-type-provider-zod';
import { z } from 'zod';

/** `/healthz` (the process is alive) and `/readyz` (its storage answers); no key needed. */
export function healthRoutes(deps: { isReady: () => Promise<boolean> }): FastifyPluginAsyncZod {
  return async (app) => {
    app.get(
      '/healthz',
      // Probes come every few seconds: logged only when something goes wrong.
      {
        logLevel: 'warn',
        schema: {
          tags: ['health'],
          security: [],
          summary: 'Liveness',
          description:
            'Answers 200 while the process serves requests; it reads nothing from Redis, so a storage outage does not fail it.',
          response: { 200: z.object({ status: z.literal('ok') }) },
        },
      },
      async () => ({ status: 'ok' as const }),
    );
    app.get(
      '/readyz',
      {
        logLevel: 'warn',
        schema: {
          tags: ['health'],
          security: [],
          summary: 'Readiness: Redis answers',
          description:
            'Answers 200 when Redis answers, 503 when it does not: a load balancer sends traffic only to a ready instance.',
          response: {
            200: z.object({ status: z.literal('ready') }),
            503: z.object({ status: z.literal('unavailable'), error: z.string() }),
          },
        },
      },
      async (_request, reply) =>
        (await deps.isReady())
          ? reply.code(200).send({ status: 'ready' as const })
          : reply.code(503).send({ status: 'unavailable' as const, error: 'Redis is unreachable' }),
    );
  };
}
