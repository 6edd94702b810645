import type { TracingConfig } from '../config/otel.js';
import type { Tracing } from '../domain/trace.js';

/**
 * Starts trace export when configured: loads the OpenTelemetry SDK (only then) and answers the
 * engine's Tracing (the port in domain/trace.ts); undefined when off.
 */
export async function startTracing(
  config: TracingConfig | undefined,
  resource: { serviceVersion: string; instanceId: string },
): Promise<Tracing | undefined> {
  if (config === undefined) return undefined;
  const { createOtelTracing } = await import('./otel.js');
  return createOtelTracing(config, resource);
}
