import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import type { TracingConfig } from '../src/config/otel.js';
import { hooklineThroughput, type DeliveryBenchSetup, type HooklineThroughput } from './delivery.js';

/** An OTLP/HTTP sink in a child process (bench/otlp-sink.mjs): its URL, and a stop that answers what it took. */
async function startSink(): Promise<{ url: string; stop(): Promise<{ requests: number; bytes: number }> }> {
  const child = spawn(process.execPath, [new URL('./otlp-sink.mjs', import.meta.url).pathname], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  const lines = createInterface({ input: child.stdout });
  const next = async () => ((await once(lines, 'line')) as [string])[0];
  const port = await next();
  return {
    url: `http://127.0.0.1:${port}/v1/traces`,
    async stop() {
      child.stdin.end();
      const counts = JSON.parse(await next()) as { requests: number; bytes: number };
      await once(child, 'exit');
      return counts;
    },
  };
}

export interface TraceCost {
  off: HooklineThroughput;
  on: HooklineThroughput;
  exported: { requests: number; bytes: number };
}

/**
 * The e2e run twice in one process, trace export off then on (http/protobuf, the default
 * parentbased_always_on sampler, so every delivery's spans are recorded and exported): the CPU a
 * delivery costs with traces, against the same run without, taken minutes apart.
 */
export async function traceCost(setup: DeliveryBenchSetup): Promise<TraceCost> {
  const off = await hooklineThroughput(setup);
  const sink = await startSink();
  try {
    const tracing: TracingConfig = {
      url: sink.url,
      protocol: 'http/protobuf',
      headers: {},
      serviceName: 'hookline-bench',
      sampler: 'parentbased_always_on',
      samplerRatio: 1,
    };
    const on = await hooklineThroughput({ ...setup, config: { ...setup.config, tracing } });
    return { off, on, exported: await sink.stop() };
  } catch (error) {
    await sink.stop().catch(() => undefined);
    throw error;
  }
}
