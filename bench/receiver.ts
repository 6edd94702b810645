/**
 * The bench's webhook receiver, run as its own process (forked by bench/receiver-client.ts) so its
 * CPU is not the engine's. It listens on 127.0.0.1, verifies every request's signature (Standard
 * Webhooks or the legacy `x-webhook-signature` header, per run), counts per run, and holds requests
 * on hanging paths without ever answering. The parent drives it over IPC (bench/receiver-protocol.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { verifyLegacySignature, verifyStandardWebhook } from '@hookline/verify';
import { wallMs } from './measure.js';
import type { CapacityStats, ReceiverEnvelope, ReceiverReply, RunConfig, RunStats } from './receiver-protocol.js';

interface RunState {
  config: RunConfig;
  stats: RunStats;
  seen: Set<string>;
  times: Map<string, number>;
  hanging: Set<ServerResponse>;
  /** Requests open on the capacity listener. */
  capacityInflight: number;
}

const runs = new Map<string, RunState>();
const hangPrefixes: string[] = [];
const servers: Server[] = [];
/** Held requests of paths that belong to no known run. */
const strayHanging = new Set<ServerResponse>();

function send(message: ReceiverReply): void {
  process.send?.(message);
}

function emptyStats(): RunStats {
  return { verified: 0, failed: 0, duplicates: 0, hung: 0, refused: 0, firstAtMs: 0, lastAtMs: 0, bytes: 0 };
}

function emptyCapacityStats(): CapacityStats {
  return {
    accepted: 0,
    throttled: 0,
    lateAccepted: 0,
    lateThrottled: 0,
    firstAtMs: 0,
    lastAcceptedAtMs: 0,
    acceptedAtMs: [],
    mostInflight: 0,
    othersLastAtMs: 0,
  };
}

function header(request: IncomingMessage, name: string): string | undefined {
  const value = request.headers[name];
  return typeof value === 'string' ? value : undefined;
}

function handle(request: IncomingMessage, response: ServerResponse): void {
  const chunks: Buffer[] = [];
  request.on('data', (chunk: Buffer) => chunks.push(chunk));
  request.on('end', () => {
    const path = request.url ?? '/';
    const [, runId = '', second = '', third = ''] = path.split('/');
    const run = runs.get(runId);
    if (hangPrefixes.some((prefix) => path.startsWith(prefix))) {
      if (run) {
        run.stats.hung += 1;
        run.hanging.add(response);
      } else strayHanging.add(response);
      response.on('close', () => (run ? run.hanging.delete(response) : strayHanging.delete(response)));
      return;
    }
    const index = Number(second === 'hang' ? third : second);
    const secret = run?.config.secrets[index];
    if (!run || secret === undefined) {
      response.writeHead(404).end();
      return;
    }
    const body = Buffer.concat(chunks);
    const id = header(request, 'webhook-id') ?? header(request, 'x-delivery-id');
    const ok =
      id !== undefined &&
      (run.config.scheme === 'standard'
        ? verifyStandardWebhook({ secret, headers: request.headers, body })
        : verifyLegacySignature({ secret, header: request.headers['x-webhook-signature'], body }));
    if (!ok) {
      run.stats.failed += 1;
      response.writeHead(401).end();
      return;
    }
    const faults = run.config.faults;
    if (faults) {
      const roll = Math.random();
      if (roll < faults.hangRate) {
        run.stats.hung += 1;
        run.hanging.add(response);
        response.on('close', () => run.hanging.delete(response));
        return;
      }
      if (roll < faults.hangRate + faults.failRate) {
        run.stats.refused += 1;
        response.writeHead(500).end();
        return;
      }
    }
    const atMs = wallMs();
    const capacity = run.config.capacity;
    let answerDelayMs = 0;
    const seen = capacity === undefined ? undefined : (run.stats.capacity ??= emptyCapacityStats());
    if (capacity !== undefined && seen !== undefined && request.socket.localPort === capacity.port) {
      if (seen.firstAtMs === 0) seen.firstAtMs = atMs;
      const late = atMs >= seen.firstAtMs + capacity.warmUpMs;
      if (run.capacityInflight >= capacity.inflight) {
        seen.throttled += 1;
        if (late) seen.lateThrottled += 1;
        response.writeHead(429).end();
        return;
      }
      seen.accepted += 1;
      if (late) seen.lateAccepted += 1;
      seen.lastAcceptedAtMs = atMs;
      seen.acceptedAtMs.push(atMs);
      run.capacityInflight += 1;
      seen.mostInflight = Math.max(seen.mostInflight, run.capacityInflight);
      answerDelayMs = capacity.latencyMs;
      response.on('close', () => (run.capacityInflight -= 1));
    } else if (seen !== undefined) seen.othersLastAtMs = atMs;
    const firstDelayMs = run.stats.verified === 0 && run.seen.size === 0 ? (run.config.firstAnswerDelayMs ?? 0) : 0;
    if (run.seen.has(id)) run.stats.duplicates += 1;
    else {
      run.seen.add(id);
      run.stats.verified += 1;
      run.stats.bytes += body.length;
      if (run.stats.firstAtMs === 0) run.stats.firstAtMs = atMs;
      run.stats.lastAtMs = atMs;
      if (run.config.recordTimes) run.times.set(id, atMs);
    }
    if (firstDelayMs + answerDelayMs > 0) setTimeout(() => response.writeHead(204).end(), firstDelayMs + answerDelayMs);
    else response.writeHead(204).end();
  });
}

async function listen(): Promise<number> {
  const server = createServer(handle);
  // Keep connections across the engine's idle gaps (Node's default closes them after 5 s).
  server.keepAliveTimeout = 65_000;
  server.headersTimeout = 66_000;
  await new Promise<void>((resolve, reject) => server.once('error', reject).listen(0, '127.0.0.1', resolve));
  servers.push(server);
  return (server.address() as AddressInfo).port;
}

function abortHanging(responses: Set<ServerResponse>): void {
  for (const response of responses) response.destroy();
  responses.clear();
}

async function close(): Promise<void> {
  for (const run of runs.values()) abortHanging(run.hanging);
  abortHanging(strayHanging);
  await Promise.all(
    servers.map(
      (server) =>
        new Promise<void>((resolve) => {
          server.closeAllConnections();
          server.close(() => resolve());
        }),
    ),
  );
}

async function answer(message: ReceiverEnvelope): Promise<unknown> {
  switch (message.type) {
    case 'run':
      runs.set(message.run.runId, {
        config: message.run,
        stats: emptyStats(),
        seen: new Set(),
        times: new Map(),
        hanging: new Set(),
        capacityInflight: 0,
      });
      return null;
    case 'hang':
      hangPrefixes.push(...message.prefixes);
      return null;
    case 'listen': {
      const ports: number[] = [];
      for (let i = 0; i < message.count; i += 1) ports.push(await listen());
      return ports;
    }
    case 'stats':
      return runs.get(message.runId)?.stats ?? emptyStats();
    case 'times': {
      const times = runs.get(message.runId)?.times ?? new Map<string, number>();
      return { ids: [...times.keys()], atMs: [...times.values()] };
    }
    case 'forget': {
      const run = runs.get(message.runId);
      if (run) abortHanging(run.hanging);
      runs.delete(message.runId);
      return null;
    }
    case 'close':
      await close();
      return null;
  }
}

process.on('message', (message: ReceiverEnvelope) => {
  answer(message).then(
    (result) => {
      send({ type: 'reply', id: message.id, ok: true, result });
      if (message.type === 'close') process.disconnect();
    },
    (error: unknown) =>
      send({ type: 'reply', id: message.id, ok: false, error: error instanceof Error ? error.message : String(error) }),
  );
});
// The parent went away (or closed us): stop listening so the process can end.
process.on('disconnect', () => void close());

const port = await listen();
send({ type: 'ready', port });
