/**
 * Many HTTPS receivers at low rates (issue 24): every receiver an origin of its own (its own port on
 * 127.0.0.1, a certificate from a CA made for the run and trusted as a user would, through
 * NODE_EXTRA_CA_CERTS), each getting an event every `receivers ÷ rate` seconds, delivered by a real
 * `hookline worker` process. Receivers close connections idle for `idleMs`: Node's default (5 s)
 * makes every delivery a new connection, nginx's (75 s) lets one connection serve them all. The
 * same traffic to one origin is the yardstick for the worker's CPU per delivery.
 */
import { fork } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { makeTestCa } from '../test/helpers/test-ca.js';
import type { DeliveryBenchSetup } from './delivery.js';
import { BenchEngine } from './engine.js';
import { sleep, waitUntil } from './measure.js';
import { EventFactory } from './workload.js';

export interface ReceiversRun {
  label: string;
  receivers: number;
  origins: number;
  idleMs: number;
  /** HOOKLINE_TLS_SESSION_CACHE of the worker (0: no resumption, as undici's own cache behaved). */
  tlsSessionCache: number;
  deliveries: number;
  /** Connections the receivers accepted after the first contacts, and how many of them resumed a TLS session. */
  connections: number;
  resumed: number;
  /** Connections of the first contacts (before the measured run), all full TLS handshakes but for a reuse. */
  firstContactConnections: number;
  firstContactResumed: number;
  /** The worker process's CPU over the run ÷ deliveries. */
  workerCpuUsPerDelivery: number;
  seconds: number;
}

export interface ReceiversOptions {
  receivers: number;
  /** Events a second, all receivers together. */
  ratePerSecond: number;
  seconds: number;
  /** The short idle timeout (Node's default, 5 s) and the long one (nginx's, 75 s). */
  shortIdleMs: number;
  longIdleMs: number;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
/** Ingest requests a second: the rate is spread over them. */
const POSTS_PER_SECOND = 20;

interface ReceiverStats {
  requests: number;
  connections: number;
  resumed: number;
}

/** The receivers' process (bench/tls-receivers.ts): their ports, their counts, and a way to stop them. */
async function startReceivers(count: number, idleMs: number, tls: { certPath: string; keyPath: string }) {
  const child = fork(path.join(ROOT, 'bench', 'tls-receivers.ts'), [], {
    execArgv: ['--import', 'tsx'],
    env: {
      ...process.env,
      RECEIVERS: String(count),
      IDLE_MS: String(idleMs),
      TLS_CERT: tls.certPath,
      TLS_KEY: tls.keyPath,
    },
    stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
  });
  const ports = await new Promise<number[]>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('the receivers did not start within 30 s')), 30_000);
    child.once('message', (message: { ports: number[] }) => {
      clearTimeout(timer);
      resolve(message.ports);
    });
    child.once('exit', (code) => reject(new Error(`the receivers exited with ${code}`)));
  });
  return {
    ports,
    stats: () =>
      new Promise<ReceiverStats>((resolve) => {
        child.once('message', (message: ReceiverStats) => resolve(message));
        child.send('stats');
      }),
    close: async () => {
      const exited = new Promise((resolve) => child.once('exit', resolve));
      child.send('close');
      await exited;
    },
  };
}

async function receiversRun(
  setup: DeliveryBenchSetup,
  tls: { caPath: string; certPath: string; keyPath: string },
  options: ReceiversOptions,
  variant: { label: string; origins: 'many' | 'one'; idleMs: number; tlsSessionCache: number },
): Promise<ReceiversRun> {
  const { receivers, ratePerSecond, seconds } = options;
  const origins = variant.origins === 'one' ? 1 : receivers;
  const server = await startReceivers(origins, variant.idleMs, tls);
  const engine = await BenchEngine.start({ redisUrl: setup.redisUrl, config: setup.config, apiConnections: 2 });
  try {
    const urls = Array.from(
      { length: receivers },
      (_, i) => `https://127.0.0.1:${server.ports[i % origins]}/hook/${i}`,
    );
    await engine.registerWebhooks(
      urls,
      urls.map(
        (_, i) => `whsec_${Buffer.from(`bench-receiver-secret-${String(i).padStart(9, '0')}`).toString('base64')}`,
      ),
    );
    const worker = await engine.startWorkerProcess({
      concurrency: setup.concurrency,
      env: { NODE_EXTRA_CA_CERTS: tls.caPath, HOOKLINE_TLS_SESSION_CACHE: String(variant.tlsSessionCache) },
    });
    const factory = new EventFactory(setup.payloadBytes);
    // First contacts (one event to each receiver) come before the measured run: a worker meets a
    // receiver once in its life, and what is measured is the traffic after that.
    for (let first = 0; first < receivers; first += 100) {
      const events = Array.from({ length: Math.min(100, receivers - first) }, (_, k) =>
        factory.event(first + k, first + k),
      );
      await engine.post(JSON.stringify({ events }), events.length);
    }
    const warm = await waitUntil(
      async () => {
        const now = await server.stats();
        return now.requests >= receivers ? now : undefined;
      },
      60_000,
      `${variant.label}: first contacts`,
    );
    const total = ratePerSecond * seconds;
    const perPost = Math.max(1, Math.round(ratePerSecond / POSTS_PER_SECOND));
    const cpu0 = worker.cpuUs();
    const startedMs = Date.now();
    // Round-robin over the receivers, each post at its time (the loop is bounded by `total`).
    for (let sent = 0, post = 0; sent < total; post += 1) {
      const dueMs = startedMs + (post * 1000) / POSTS_PER_SECOND;
      if (dueMs > Date.now()) await sleep(dueMs - Date.now());
      const events = Array.from({ length: Math.min(perPost, total - sent) }, (_, k) =>
        factory.event((sent + k) % receivers, receivers + sent + k),
      );
      await engine.post(JSON.stringify({ events }), events.length);
      sent += events.length;
    }
    let stats = await server.stats();
    await waitUntil(
      async () => {
        stats = await server.stats();
        return stats.requests - warm.requests >= total ? true : undefined;
      },
      seconds * 1000 + 60_000,
      `${variant.label}: ${total} deliveries`,
    );
    const cpuUs = worker.cpuUs() - cpu0;
    return {
      label: variant.label,
      receivers,
      origins,
      idleMs: variant.idleMs,
      tlsSessionCache: variant.tlsSessionCache,
      deliveries: stats.requests - warm.requests,
      connections: stats.connections - warm.connections,
      resumed: stats.resumed - warm.resumed,
      firstContactConnections: warm.connections,
      firstContactResumed: warm.resumed,
      workerCpuUsPerDelivery: cpuUs / (stats.requests - warm.requests),
      seconds: (Date.now() - startedMs) / 1000,
    };
  } finally {
    await engine.close();
    await server.close();
  }
}

/** The scenario's runs: one origin (75 s), many origins with 75 s and 5 s receivers, and 5 s without TLS session resumption. */
export async function manyReceivers(setup: DeliveryBenchSetup, options: ReceiversOptions): Promise<ReceiversRun[]> {
  const dir = mkdtempSync(path.join(tmpdir(), 'hookline-bench-ca-'));
  try {
    const ca = makeTestCa(dir);
    const tls = { caPath: ca.caPath, certPath: path.join(dir, 'server.pem'), keyPath: path.join(dir, 'server.key') };
    const { shortIdleMs, longIdleMs } = options;
    const variants = [
      { label: 'one origin', origins: 'one' as const, idleMs: longIdleMs, tlsSessionCache: 10_000 },
      { label: 'long idle', origins: 'many' as const, idleMs: longIdleMs, tlsSessionCache: 10_000 },
      { label: 'short idle', origins: 'many' as const, idleMs: shortIdleMs, tlsSessionCache: 10_000 },
      { label: 'short idle, no session cache', origins: 'many' as const, idleMs: shortIdleMs, tlsSessionCache: 0 },
    ];
    const runs: ReceiversRun[] = [];
    for (const variant of variants) runs.push(await receiversRun(setup, tls, options, variant));
    return runs;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
