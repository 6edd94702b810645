import {
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  TraceFlags,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
  type SpanContext,
} from '@opentelemetry/api';
import { TraceState } from '@opentelemetry/core';
import { OTLPTraceExporter as JsonExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPTraceExporter as ProtobufExporter } from '@opentelemetry/exporter-trace-otlp-proto';
import { resourceFromAttributes } from '@opentelemetry/resources';
import {
  AlwaysOffSampler,
  AlwaysOnSampler,
  BasicTracerProvider,
  BatchSpanProcessor,
  ParentBasedSampler,
  TraceIdRatioBasedSampler,
  type Sampler,
} from '@opentelemetry/sdk-trace-base';
import type { TracingConfig } from '../config/otel.js';
import type { DeliverJob } from '../domain/delivery.js';
import {
  parseTraceparent,
  type AttemptEnd,
  type AttemptSpan,
  type AttemptStart,
  type IngestSpan,
  type IngestStart,
  type TraceContext,
  type Tracing,
} from '../domain/trace.js';

/**
 * The Tracing of an engine that exports: OpenTelemetry's SDK, its batch span processor (spans leave
 * in the background, in batches; a full buffer drops spans rather than holding deliveries) and the
 * OTLP/HTTP exporter of the configured protocol. Loaded only when an endpoint is configured.
 */
export function createOtelTracing(
  config: TracingConfig,
  about: { serviceVersion: string; instanceId: string },
): Tracing {
  const options = { url: config.url, headers: { ...config.headers } };
  const exporter = config.protocol === 'http/json' ? new JsonExporter(options) : new ProtobufExporter(options);
  const provider = new BasicTracerProvider({
    resource: resourceFromAttributes({
      'service.name': config.serviceName,
      'service.version': about.serviceVersion,
      'service.instance.id': about.instanceId,
    }),
    sampler: samplerOf(config),
    spanProcessors: [new BatchSpanProcessor(exporter)],
  });
  const tracer = provider.getTracer('hookline', about.serviceVersion);

  return {
    startIngest(start: IngestStart): IngestSpan {
      const parent = start.parent === undefined ? ROOT_CONTEXT : remote(start.parent, start.traceState);
      const links: Link[] = (start.links ?? []).map((link) => ({ context: spanContextOf(link) }));
      const span =
        start.source === 'http'
          ? tracer.startSpan(
              'POST /internal/v1/events',
              {
                kind: SpanKind.SERVER,
                startTime: start.startMs,
                attributes: {
                  'http.request.method': 'POST',
                  'http.route': '/internal/v1/events',
                  'hookline.ingest.events': start.events,
                },
              },
              parent,
            )
          : tracer.startSpan(
              `process ${start.stream ?? 'events'}`,
              {
                kind: SpanKind.CONSUMER,
                startTime: start.startMs,
                links,
                attributes: {
                  'messaging.system': 'redis',
                  'messaging.operation.type': 'process',
                  'messaging.destination.name': start.stream ?? 'events',
                  'messaging.batch.message_count': start.events,
                },
              },
              parent,
            );
      return {
        context: contextOf(span),
        end(summary, endMs) {
          span.setAttributes({
            'hookline.ingest.accepted': summary.accepted,
            'hookline.ingest.duplicates': summary.duplicates,
            'hookline.ingest.rejected': summary.rejected,
            'hookline.ingest.deliveries': summary.deliveries,
          });
          span.end(endMs);
        },
        fail(error, endMs) {
          span.setStatus({ code: SpanStatusCode.ERROR, message: error.message });
          span.setAttribute('error.type', error.name);
          span.end(endMs);
        },
      };
    },

    startAttempt(start: AttemptStart): AttemptSpan {
      const { job } = start;
      const span = tracer.startSpan(
        'POST',
        {
          kind: SpanKind.CLIENT,
          startTime: start.startMs,
          attributes: { ...urlAttributes(start.url), ...jobAttributes(job), 'hookline.attempt': start.attempt },
        },
        carried(job),
      );
      if (start.attempt > 1) span.setAttribute('http.request.resend_count', start.attempt - 1);
      return {
        context: contextOf(span),
        end(result: AttemptEnd) {
          span.setAttributes({ 'hookline.outcome': result.outcome, 'hookline.decision': result.decision });
          if (result.statusCode !== undefined) span.setAttribute('http.response.status_code', result.statusCode);
          if (result.decision === 'retry' && result.retryInMs !== undefined)
            span.addEvent('retry scheduled', { 'hookline.retry_in_ms': result.retryInMs }, result.endMs);
          if (result.outcome !== 'delivered') {
            // The semantic conventions' error.type: the status code for an HTTP error, else the failure's class.
            span.setAttribute(
              'error.type',
              result.statusCode === undefined ? result.outcome : String(result.statusCode),
            );
            span.setStatus({
              code: SpanStatusCode.ERROR,
              ...(result.error === undefined ? {} : { message: result.error }),
            });
          }
          span.end(result.endMs);
        },
      };
    },

    note(job, name, atMs, attributes) {
      const span = tracer.startSpan(
        name,
        { kind: SpanKind.INTERNAL, startTime: atMs, attributes: { ...jobAttributes(job), ...attributes } },
        carried(job),
      );
      span.end(atMs);
    },

    async shutdown() {
      await provider.shutdown();
    },
  };
}

function samplerOf(config: TracingConfig): Sampler {
  const ratio = () => new TraceIdRatioBasedSampler(config.samplerRatio);
  switch (config.sampler) {
    case 'always_on':
      return new AlwaysOnSampler();
    case 'always_off':
      return new AlwaysOffSampler();
    case 'traceidratio':
      return ratio();
    case 'parentbased_always_on':
      return new ParentBasedSampler({ root: new AlwaysOnSampler() });
    case 'parentbased_always_off':
      return new ParentBasedSampler({ root: new AlwaysOffSampler() });
    case 'parentbased_traceidratio':
      return new ParentBasedSampler({ root: ratio() });
  }
}

function spanContextOf(context: TraceContext, traceState?: string): SpanContext {
  return {
    traceId: context.traceId,
    spanId: context.spanId,
    traceFlags: context.sampled ? TraceFlags.SAMPLED : TraceFlags.NONE,
    isRemote: true,
    ...(traceState === undefined ? {} : { traceState: new TraceState(traceState) }),
  };
}

function remote(context: TraceContext, traceState?: string): Context {
  return trace.setSpanContext(ROOT_CONTEXT, spanContextOf(context, traceState));
}

/** The context a delivery carries (its event's trace), or none: the attempt's span starts a trace. */
function carried(job: DeliverJob): Context {
  const context = job.traceparent === undefined ? undefined : parseTraceparent(job.traceparent);
  return context === undefined ? ROOT_CONTEXT : remote(context);
}

/** The span's context; bit 0 of the W3C trace flags is "sampled". */
function contextOf(span: Span): TraceContext {
  const { traceId, spanId, traceFlags } = span.spanContext();
  return { traceId, spanId, sampled: (traceFlags & 1) === 1 };
}

function jobAttributes(job: DeliverJob): Attributes {
  return {
    'hookline.webhook.id': job.webhookId,
    'hookline.vendor.id': job.vendorId,
    'hookline.delivery.id': job.deliveryId,
    'hookline.event.id': job.eventId,
    'hookline.event.type': job.eventType,
    ...(job.replayOf === undefined ? {} : { 'hookline.replay_of': job.replayOf }),
  };
}

/** The semantic conventions' URL attributes, without the query, fragment or credentials (they may hold secrets). */
function urlAttributes(text: string): Attributes {
  try {
    const url = new URL(text);
    const port = url.port === '' ? (url.protocol === 'https:' ? 443 : 80) : Number(url.port);
    return {
      'http.request.method': 'POST',
      'url.full': `${url.protocol}//${url.host}${url.pathname}`,
      'server.address': url.hostname.replace(/^\[|\]$/g, ''),
      'server.port': port,
    };
  } catch {
    return { 'http.request.method': 'POST' };
  }
}
