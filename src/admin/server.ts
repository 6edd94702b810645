import type { RedisEventLog } from '../store/event-log.js';
import { erasureRoutes, type ErasureRouteDeps } from './routes/erasure.js';
import { webhookEventRoutes, type WebhookEventRouteDeps } from './routes/webhook-events.js';
import fastifySwagger from '@fastify/swagger';
import fastifySwaggerUi from '@fastify/swagger-ui';
import Fastify, {
  type FastifyBaseLogger,
  type FastifyError,
  type FastifyInstance,
  type RawServerDefault,
} from 'fastify';
import type { IncomingMessage, ServerResponse } from 'node:http';
import {
  hasZodFastifySchemaValidationErrors,
  serializerCompiler,
  validatorCompiler,
  type ZodTypeProvider,
} from 'fastify-type-provider-zod';
import type { AgentStatus } from '../domain/agent.js';
import { decodeUtf8, NOT_UTF8 } from '../domain/json-text.js';
import type { Ingestor } from '../ingest/ingest.js';
import type { Logger } from '../logger.js';
import type { Metrics } from '../metrics/metrics.js';
import { requestObserver } from '../metrics/observers.js';
import { portalAssets } from './routes/portal-assets.js';
import { catalogueRoutes } from './routes/catalogue.js';
import { portalSessionRoutes, type PortalRouteDeps } from './routes/portal.js';
import type { ApiKeyLookup } from '../store/api-keys.js';
import type { MachineListing } from '../store/machines.js';
import { isRedisUnavailable } from '../store/redis.js';
import type { DocLookup } from '../store/versioned-docs.js';
import type { WebhookRegistry } from '../store/webhooks.js';
import { addressGuard, createAuthorizer, type RateLimit } from './auth.js';
import { ApiError, errorBody, type ErrorCode } from './errors.js';
import { swaggerOptions } from './openapi.js';
import { DOCS_CSP, secureEveryAnswer } from './security-headers.js';
import { keepResponseForLog, logRequestNow, RequestLogController } from './request-log.js';
import { discardRestOfBody } from './refused-body.js';
import { agentRoutes } from './routes/agents.js';
import { deliveryRoutes, type DeliveryRouteDeps } from './routes/deliveries.js';
import { eventRoutes, type IngestRateLimit } from './routes/events.js';
import { healthRoutes } from './routes/health.js';
import { machineRoutes } from './routes/machines.js';
import { operatorRoutes, type OperatorRouteDeps } from './routes/operator.js';
import { statsRoutes, type StatsRouteDeps } from './routes/stats.js';
import { taskRoutes, type TaskReader } from './routes/tasks.js';
import { filterTestRoutes, type FilterTestRouteDeps } from './routes/filter-test.js';
import { signingKeyRoutes } from './routes/signing-keys.js';
import { webhookRoutes } from './routes/webhooks.js';

/** Everything the admin API needs, passed in by the composition root (createEngine). */
export interface AdminDeps {
  logger: Logger;
  bodyLimitBytes: number;
  apiKeys: ApiKeyLookup;
  webhooks: WebhookRegistry;
  tasks: TaskReader;
  agents: DocLookup<AgentStatus>;
  machines: MachineListing;
  /** Event ingest (`POST /internal/v1/events`). */
  ingestor: Pick<Ingestor, 'ingest'>;
  /** Delivery log, dead-letter replays and test events. */
  deliveries: Omit<DeliveryRouteDeps, 'authorize' | 'webhooks'>;
  /** The operator's views and actions across vendors (role admin). */
  operator: Omit<OperatorRouteDeps, 'authorize' | 'webhooks' | 'logger'>;
  /** Vendor portal sessions: issuing links, and the session cookie the vendor routes accept. */
  portal: Omit<PortalRouteDeps, 'authorize' | 'guardAddress' | 'logger' | 'nowMs'>;
  /** Per-webhook delivery stats and the circuits they show. */
  stats: Omit<StatsRouteDeps, 'authorize' | 'webhooks' | 'nowMs'>;
  /** The last events of webhooks with a filter (the filter dry run's `recent`). */
  recentEvents: FilterTestRouteDeps['recentEvents'];
  /** Each webhook's event log: the event feed; its default retention bounds a webhook's own. */
  eventLog: RedisEventLog;
  /** Erasure tasks (an event, a vendor). */
  eraser: ErasureRouteDeps['eraser'];
  /** false (HOOKLINE_EVENT_LOG=false): the event feed and range replays answer 409 event_log_disabled. */
  eventLogOn: boolean;
  /** Replays of a time range of a webhook's event log. */
  rangeReplayer: WebhookEventRouteDeps['rangeReplayer'];
  /** Per-key request limit (429 with Retry-After past it); event ingest is exempt. */
  rateLimit?: RateLimit;
  /** Event ingest's own limit, in events per second per key (429 with Retry-After past it). */
  ingestRateLimit?: IngestRateLimit;
  /** Requests per second per client address that authenticate nothing (429 with Retry-After past it). */
  addressRateLimit?: RateLimit;
  /** Resolves true when the engine's storage answers. */
  isReady: () => Promise<boolean>;
  /** false (production's default): registration refuses callback URLs on loopback, private or reserved addresses. */
  allowPrivateTargets: boolean;
  /** The installation's retry schedule (HOOKLINE_RETRY_SCHEDULE): webhooks' retry policies stay within it. */
  retryScheduleMs: readonly number[];
  /** Clock, Unix ms (whether a secret rotation is still in its overlap); default Date.now. */
  nowMs?: () => number;
  /** When given: request metrics, and `GET /metrics` (after `collect` refreshes scrape-time gauges). */
  metrics?: {
    registry: Metrics['registry'];
    httpRequests: Metrics['httpRequests'];
    httpDuration: Metrics['httpDuration'];
    collect?: () => Promise<void>;
  };
  /** Serve `GET /metrics` here (default true); false when a health server of its own serves it, off the published port. */
  metricsRoute?: boolean;
  /** The vendor portal's built browser app (`dist/portal/`), served under `/portal/`. */
  portalAssetsDir: string;
  /** The proxies whose X-Forwarded-* headers give a request's client address and protocol (HOOKLINE_TRUST_PROXY); none by default. */
  trustProxy?: readonly string[];
}

export type AdminServer = FastifyInstance<
  RawServerDefault,
  IncomingMessage,
  ServerResponse,
  FastifyBaseLogger,
  ZodTypeProvider
>;

const FASTIFY_CODES: Partial<Record<string, ErrorCode>> = {
  FST_ERR_CTP_INVALID_MEDIA_TYPE: 'unsupported_media_type',
  FST_ERR_CTP_BODY_TOO_LARGE: 'body_too_large',
  FST_ERR_CTP_INVALID_CONTENT_LENGTH: 'invalid_request',
  FST_ERR_CTP_EMPTY_JSON_BODY: 'invalid_json',
  FST_ERR_CTP_INVALID_JSON_BODY: 'invalid_json',
};

/** "body", "querystring", "params" → the words a client understands. */
const CONTEXT_WORDS: Record<string, string> = {
  body: 'request body',
  querystring: 'query parameters',
  params: 'path parameters',
};

function validationMessage(error: FastifyError): string {
  const issues = (error.validation ?? []).map((issue) => {
    const path = issue.instancePath.replace(/^\//, '').replaceAll('/', '.');
    const message = issue.message ?? 'is invalid';
    // Our schemas' messages name their field; zod's generic ones get the path in front.
    return path && !message.includes(path.split('.').at(-1) ?? path) ? `${path}: ${message}` : message;
  });
  const where = CONTEXT_WORDS[error.validationContext ?? ''] ?? 'request';
  return `Invalid ${where}: ${[...new Set(issues)].join('; ')}`;
}

/** `GET /metrics` (Prometheus text; `collect` refreshes the scrape-time gauges first). */
function metricsRoute(app: FastifyInstance, metrics: NonNullable<AdminDeps['metrics']>): void {
  app.get('/metrics', { schema: { hide: true }, logLevel: 'warn' }, async (_request, reply) => {
    await metrics.collect?.();
    return reply.header('content-type', metrics.registry.contentType).send(await metrics.registry.metrics());
  });
}

export type HealthServer = FastifyInstance;

/**
 * The standalone worker's small server: the admin API's `/healthz` and `/readyz`, and `/metrics`;
 * nothing else. Like the admin API it never listens by itself.
 */
export async function buildHealthServer(
  deps: Pick<AdminDeps, 'logger' | 'isReady'> & { metrics: NonNullable<AdminDeps['metrics']> },
): Promise<HealthServer> {
  // Probes and scrapes every few seconds would drown the log: only warnings and errors are logged.
  const loggerInstance: FastifyBaseLogger = deps.logger.child({}, { level: 'warn' });
  const app = Fastify({
    loggerInstance,
    logController: new RequestLogController(),
    return503OnClosing: true,
  }).withTypeProvider<ZodTypeProvider>();
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  keepResponseForLog(app);
  secureEveryAnswer(app, { publicUrlHttps: false });
  app.setNotFoundHandler((_request, reply) => reply.code(404).send(errorBody('route_not_found')));
  await app.register(healthRoutes({ isReady: deps.isReady }));
  metricsRoute(app, deps.metrics);
  await app.ready();
  return app;
}

/**
 * Builds the admin API (seed endpoints, OpenAPI, health). It never listens by itself: the CLI calls
 * listen(), tests call inject().
 */
export async function buildAdminServer(deps: AdminDeps): Promise<AdminServer> {
  // A child of its own: the server's level may be changed (see quietListen) without touching the process's logger.
  const loggerInstance: FastifyBaseLogger = deps.logger.child({});
  const app = Fastify({
    loggerInstance,
    // One line per request, when it completes, with its query values redacted (see request-log.ts).
    logController: new RequestLogController(),
    bodyLimit: deps.bodyLimitBytes,
    // Forwarded headers are anyone's to write: believed only from the proxies the operator named.
    trustProxy: deps.trustProxy !== undefined && deps.trustProxy.length > 0 ? [...deps.trustProxy] : false,
    return503OnClosing: true,
    routerOptions: { ignoreTrailingSlash: false, maxParamLength: 512 },
  }).withTypeProvider<ZodTypeProvider>();
  // JSON only: without this, Fastify would hand text/plain bodies to the validators as strings.
  app.removeContentTypeParser('text/plain');
  // Fastify's own JSON parser decodes bodies lossily (invalid bytes become U+FFFD), so this one takes
  // the raw bytes, refuses any that are not UTF-8, and leaves the rest (empty body, malformed JSON,
  // prototype poisoning) to Fastify's parser. Body limits still apply: they bound the read itself.
  const parseJson = app.getDefaultJsonParser('error', 'error');
  app.removeContentTypeParser('application/json');
  app.addContentTypeParser('application/json', { parseAs: 'buffer' }, (request, body, done) => {
    const text = decodeUtf8(body as Buffer);
    if (text === undefined) return done(new ApiError('invalid_json', `The request body ${NOT_UTF8}`), undefined);
    void parseJson(request, text, done);
  });
  app.setValidatorCompiler(validatorCompiler);
  app.setSerializerCompiler(serializerCompiler);
  keepResponseForLog(app);

  app.setErrorHandler(async (error: FastifyError, request, reply) => {
    // Refused unread: the rest is read first, so the producer can read the 413 (see refused-body.ts).
    if (error.code === 'FST_ERR_CTP_BODY_TOO_LARGE') await discardRestOfBody(request.raw);
    if (error instanceof ApiError) {
      // A route's own 429 says when to come back, as the request limits' do.
      if (error.statusCode === 429) void reply.header('retry-after', String(error.retryAfterS));
      return reply.code(error.statusCode).send({ ...errorBody(error.code, error.message), ...error.details });
    }
    if (hasZodFastifySchemaValidationErrors(error))
      return reply.code(400).send(errorBody('invalid_request', validationMessage(error)));
    const mapped = error.code ? FASTIFY_CODES[error.code] : undefined;
    if (mapped) return reply.code(error.statusCode ?? 400).send(errorBody(mapped));
    if (error instanceof SyntaxError || (error.statusCode === 400 && /JSON/i.test(error.message))) {
      return reply.code(400).send(errorBody('invalid_json'));
    }
    if (isRedisUnavailable(error)) {
      // At info, without a stack: the outage itself is logged once, at warn, by the connection watcher.
      logRequestNow(request, reply, { status: 503, level: 'info', code: 'storage_unavailable', err: error.message });
      return reply.code(503).header('retry-after', '1').send(errorBody('storage_unavailable'));
    }
    if (error.statusCode !== undefined && error.statusCode >= 400 && error.statusCode < 500) {
      return reply.code(error.statusCode).send(errorBody('invalid_request', error.message));
    }
    logRequestNow(request, reply, { status: 500, level: 'error', code: 'internal', err: error });
    return reply.code(500).send(errorBody('internal'));
  });
  secureEveryAnswer(app, { publicUrlHttps: deps.portal.publicUrl?.startsWith('https:') ?? false });
  app.setNotFoundHandler((_request, reply) => reply.code(404).send(errorBody('route_not_found')));

  const metrics = deps.metrics;
  if (metrics) {
    const observe = requestObserver(metrics);
    app.addHook('onResponse', async (request, reply) => {
      // The route pattern, never the raw URL: ids in paths would make the label unbounded.
      observe({
        route: request.routeOptions.url ?? 'unmatched',
        method: request.method,
        status: reply.statusCode,
        durationMs: reply.elapsedTime,
      });
    });
    if (deps.metricsRoute !== false) metricsRoute(app, metrics);
  }

  await app.register(fastifySwagger, swaggerOptions());
  await app.register(fastifySwaggerUi, { routePrefix: '/docs', staticCSP: DOCS_CSP });
  app.get('/openapi.json', { schema: { hide: true } }, async () => app.swagger());

  const guardAddress = addressGuard(deps.addressRateLimit);
  const authorize = createAuthorizer(deps.apiKeys, guardAddress, deps.rateLimit, deps.portal.sessions);
  await app.register(healthRoutes({ isReady: deps.isReady }));
  await app.register(
    webhookRoutes({
      authorize,
      webhooks: deps.webhooks,
      allowPrivateTargets: deps.allowPrivateTargets,
      retentionMs: deps.eventLog.defaultRetentionMs,
      retryScheduleMs: deps.retryScheduleMs,
      nowMs: deps.nowMs ?? Date.now,
    }),
  );
  await app.register(filterTestRoutes({ authorize, webhooks: deps.webhooks, recentEvents: deps.recentEvents }));
  await app.register(signingKeyRoutes({ authorize, webhooks: deps.webhooks, nowMs: deps.nowMs ?? Date.now }));
  await app.register(
    eventRoutes({
      authorize,
      ingestor: deps.ingestor,
      ...(deps.ingestRateLimit ? { ingestRateLimit: deps.ingestRateLimit } : {}),
    }),
  );
  await app.register(deliveryRoutes({ authorize, webhooks: deps.webhooks, ...deps.deliveries }));
  await app.register(erasureRoutes({ authorize, eraser: deps.eraser, logger: deps.logger }));
  await app.register(
    webhookEventRoutes({
      authorize,
      webhooks: deps.webhooks,
      log: deps.eventLog,
      logOn: deps.eventLogOn,
      rangeReplayer: deps.rangeReplayer,
      logger: deps.logger,
      nowMs: deps.nowMs ?? Date.now,
    }),
  );
  await app.register(statsRoutes({ authorize, webhooks: deps.webhooks, nowMs: deps.nowMs ?? Date.now, ...deps.stats }));
  await app.register(taskRoutes({ authorize, tasks: deps.tasks, logger: deps.logger }));
  await app.register(operatorRoutes({ authorize, webhooks: deps.webhooks, logger: deps.logger, ...deps.operator }));
  await app.register(
    portalSessionRoutes({
      authorize,
      guardAddress,
      logger: deps.logger,
      nowMs: deps.nowMs ?? Date.now,
      ...deps.portal,
    }),
  );
  await app.register(agentRoutes({ authorize, agents: deps.agents }));
  await app.register(machineRoutes({ authorize, machines: deps.machines }));
  // The vendor portal's page and its event catalogue.
  await app.register(portalAssets({ dir: deps.portalAssetsDir, logger: deps.logger }));
  await app.register(catalogueRoutes());
  await app.ready();
  return app;
}
