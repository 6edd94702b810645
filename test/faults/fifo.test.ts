import { mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  ensureRedisServerBinary,
  freeLoopbackPort,
  startRedisServer,
  type RedisServerHandle,
} from '../../src/embedded/redis-server.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { startCli } from '../helpers/cli.js';
import { machineEvent, machineEventFor } from '../helpers/events.js';
import { KeyedReceiver, machineIdsOfDistinctLines } from '../helpers/keyed-receiver.js';
import { lcg } from '../helpers/random.js';
import { reportFault, tallyDeliveries } from '../helpers/fault-summary.js';
import { settles, waitFor } from '../helpers/wait.js';
import { workerProcessEnv } from '../helpers/worker.js';
import { closeServer, listenOnLoopback } from '../helpers/http-server.js';

/**
 * A receiver that fails a share of the requests at random (500) and records, in order, the event
 * ids it answered 200 to a sender still there to read it. One request (see holdAt) may be held.
 */
class FlakyReceiver {
  /** The request held (its event id, and the sender's port: whose connection it came on). */
  held: { eventId: string; remotePort: number } | undefined;
  private hold: { at: number; ms: number } | undefined;
  /** Every request's event id, in arrival order. */
  readonly received: string[] = [];
  /** When each request arrived (ms), in arrival order. */
  readonly arrivedAtMs: number[] = [];
  /** The event id of every request answered 200, in the order of the answers. */
  readonly succeeded: string[] = [];
  private readonly server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const eventId = String(request.headers['webhook-id']);
      this.received.push(eventId);
      this.arrivedAtMs.push(Date.now());
      const held = this.hold?.at === this.received.length;
      if (held) this.held = { eventId, remotePort: request.socket.remotePort ?? 0 };
      else if (Math.random() < this.failureRate) return void response.writeHead(500).end();
      const answer = () => {
        // A sender killed meanwhile never learns of the answer: no success.
        if (request.socket.destroyed) return;
        this.succeeded.push(eventId);
        response.writeHead(200).end();
      };
      const delayMs = held ? this.hold!.ms : this.delayMs;
      if (delayMs > 0) setTimeout(answer, delayMs);
      else answer();
    });
  });

  constructor(
    private readonly failureRate: number,
    private readonly delayMs = 0,
  ) {}

  /** Holds the `at`-th request (1-based) for `ms` before answering it 200. */
  holdAt(at: number, ms: number): void {
    this.hold = { at, ms };
  }

  start(): Promise<string> {
    return listenOnLoopback(this.server);
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}

/** The longest time from `fromMs` to the first arrival after it, or between two arrivals after it. */
function longestGapMs(arrivedAtMs: readonly number[], fromMs: number): number {
  const after = arrivedAtMs.filter((atMs) => atMs >= fromMs);
  return Math.max(after[0]! - fromMs, ...after.slice(1).map((atMs, i) => atMs - after[i]!));
}

/** Each id once, at its first position. */
const firsts = (ids: readonly string[]) => [...new Set(ids)];

/**
 * Whether process `pid` holds a TCP socket whose local port is `port` (Linux: the socket inodes
 * of /proc/net/tcp{,6} against the process's open files): which worker sent a request.
 */
function ownsLocalPort(pid: number, port: number): boolean {
  const inodes = new Set<string>();
  for (const table of ['/proc/net/tcp', '/proc/net/tcp6']) {
    for (const line of readFileSync(table, 'utf8').split('\n').slice(1)) {
      const columns = line.trim().split(/\s+/);
      const localPort = columns[1]?.split(':')[1];
      if (localPort !== undefined && parseInt(localPort, 16) === port && columns[9] !== undefined)
        inodes.add(columns[9]);
    }
  }
  return readdirSync(`/proc/${pid}/fd`).some((fd) => {
    try {
      const inode = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`))?.[1];
      return inode !== undefined && inodes.has(inode);
    } catch {
      return false;
    }
  });
}

/** Waits until no FIFO line waits, then checks that none left an entry in its partition's heads index. */
async function noHeadLeft(t: TestApp): Promise<void> {
  await waitFor(async () => (await t.fifoLines.linesWaiting()) === 0, 10_000, 'every line empty');
  const heads = await Promise.all(t.queues.partitions.map((_, n) => t.redis.zcard(t.keys.fifo.heads(n))));
  expect(heads, 'heads index entries per partition').toEqual(heads.map(() => 0));
  expect(await t.fifoLines.oldestHeadAgeMs(Date.now())).toBe(0);
}

describe('FIFO webhook across worker processes', () => {
  let t: TestApp;
  let receiver: FlakyReceiver;
  /** The receiver of the running test (a FlakyReceiver or a KeyedReceiver), closed after it. */
  let serving: { close(): Promise<void> } | undefined;
  const children: { kill(signal: NodeJS.Signals): boolean }[] = [];
  let afterAll: (() => Promise<void>) | undefined;

  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await serving?.close();
    serving = undefined;
    await t.close();
    await afterAll?.();
    afterAll = undefined;
  });

  /**
   * A FIFO webhook at `flaky`, two worker processes (with `workerEnv` on top of the test
   * environment) and `total` events ingested 100 a call, one call after another; answers the
   * workers and the event ids in accept order. `keyed`: the webhook's ordering key, and the machine
   * id of the i-th event (else each event has a machine of its own, and the webhook one line).
   */
  async function startLine(options: {
    flaky: FlakyReceiver | KeyedReceiver;
    retryScheduleMs: number[];
    workerEnv: Record<string, string>;
    total: number;
    redisUrl?: string;
    keyed?: { orderingKey: string; machineIdOf: (i: number) => string };
  }) {
    const { retryScheduleMs, total } = options;
    t = await testApp({
      retryScheduleMs,
      queuePartitions: 2,
      ...(options.redisUrl === undefined ? {} : { redisUrl: options.redisUrl }),
    });
    serving = options.flaky;
    if (options.flaky instanceof FlakyReceiver) receiver = options.flaky;
    const base = await options.flaky.start();
    expect(
      (
        await t.webhooks.create('v', {
          eventType: 'EVENT_TYPE_MACHINE_CREATED',
          callbackUrl: `${base}/in`,
          ordering: 'fifo',
          ...(options.keyed === undefined ? {} : { orderingKey: options.keyed.orderingKey }),
        })
      ).ok,
    ).toBe(true);
    const schedule = retryScheduleMs.map((ms) => (ms === 0 ? '0s' : `${ms}ms`)).join(',');
    const env = async () => workerProcessEnv(t, { HOOKLINE_RETRY_SCHEDULE: schedule, ...options.workerEnv });
    const workers = await Promise.all(
      [1, 2].map(async () => startCli(['worker'], await env(), /delivery worker running/)),
    );
    children.push(...workers.map((w) => w.child));
    const acceptOrder: string[] = [];
    const { keyed } = options;
    for (let i = 0; i < total; i += 100) {
      const events = Array.from({ length: Math.min(100, total - i) }, (_, j) =>
        keyed === undefined ? machineEvent('v') : machineEventFor('v', keyed.machineIdOf(i + j)),
      );
      expect((await t.ingestor.ingest(events, 'http')).every((r) => r.status === 'accepted')).toBe(true);
      acceptOrder.push(...events.map((e) => e.event_id));
    }
    return { workers, acceptOrder };
  }

  it('1,000 events, a receiver failing 20 % at random, two workers, one SIGKILLed mid-run: first successes in strict accept order, none lost', async () => {
    const startedMs = Date.now();
    const TOTAL = 1_000;
    const { workers, acceptOrder } = await startLine({
      flaky: new FlakyReceiver(0.2),
      // Ten attempts 20 ms apart: a failure holds the line for one short retry; dead-lettering
      // (ten failures in a row, 0.2^10) is not expected.
      retryScheduleMs: [0, 20, 20, 20, 20, 20, 20, 20, 20, 20],
      // A lock of 2 s and a timeout of 2 s: a killed worker's lease ends within 4 s.
      workerEnv: { HOOKLINE_DELIVERY_TIMEOUT: '2s' },
      total: TOTAL,
    });

    // About a third of the way, one request is held: the worker that sent it is killed while it
    // waits for the answer, holding the line's lease with the head in flight.
    receiver.holdAt(Math.round((TOTAL * 1.25) / 3), 3_000);
    const held = await waitFor(() => receiver.held, 40_000, 'the held request');
    const victim = workers.find((w) => ownsLocalPort(w.child.pid!, held.remotePort));
    expect(victim, 'the worker that sent the held request').toBeDefined();
    const killedAtMs = Date.now();
    const receivedAtKill = receiver.received.length;
    victim!.child.kill('SIGKILL');
    expect(await victim!.exited).toBeNull();
    const atKill = new Set(receiver.succeeded).size;

    await settles(() => new Set(receiver.succeeded).size >= TOTAL, 45_000);
    const accepted = new Set(acceptOrder);
    const tally = tallyDeliveries(accepted, receiver.succeeded);
    const firstSuccesses = firsts(receiver.succeeded);
    // Where the first successes leave accept order (none expected).
    const outOfOrder = firstSuccesses.filter((id, i) => id !== acceptOrder[i]).length;
    const failures = receiver.received.length - receiver.succeeded.length;
    // The line stands still from the kill until the killed worker's lease ends (4 s here).
    const stallMs = longestGapMs(receiver.arrivedAtMs, killedAtMs);
    reportFault('fifo-sigkill', tally, startedMs, {
      delivered_before_kill: atKill,
      failed_answers: failures,
      out_of_order: outOfOrder,
      longest_gap_after_kill_ms: stallMs,
    });
    expect(tally.lost, 'every accepted event delivered').toBe(0);
    expect(firstSuccesses, 'first successful receipts in accept order').toEqual(acceptOrder);
    // The killed worker's head in flight was the first thing sent after the kill.
    expect(receiver.received[receivedAtKill]).toBe(held.eventId);
    // Retries happened (a fifth fail), and the line went on past them.
    expect(failures).toBeGreaterThan(100);
    // The head the killed worker held was removed by the next holder: the heads index is left empty.
    await noHeadLeft(t);
  }, 120_000);

  it('a Redis outage mid-run (SIGKILL, 5 s): nothing sent meanwhile, then the line goes on from its head, in order, none lost', async () => {
    const startedMs = Date.now();
    const binary = await ensureRedisServerBinary(() => undefined);
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-fifo-outage-'));
    const port = await freeLoopbackPort();
    let redis: RedisServerHandle | undefined;
    // Every write reaches the disk before it is answered: the restart comes back to all that was acknowledged.
    const startRedis = async () =>
      void (redis = await startRedisServer({
        binary,
        port,
        dir,
        appendOnly: true,
        extraArgs: ['--appendfsync', 'always'],
      }));
    afterAll = async () => {
      await redis?.stop();
      rmSync(dir, { recursive: true, force: true });
    };
    await startRedis();
    const TOTAL = 400;
    const { acceptOrder } = await startLine({
      flaky: new FlakyReceiver(0),
      retryScheduleMs: [0, 100, 100, 100, 100],
      // A lease of 30 s (the default), renewed every 10 s: were it left to expire after the
      // outage, the line would stand still 15 s or more after the restart.
      workerEnv: { HOOKLINE_DELIVERY_TIMEOUT: '2s', HOOKLINE_WORKER_LOCK_DURATION: '30s' },
      total: TOTAL,
      redisUrl: `redis://127.0.0.1:${port}`,
    });
    await waitFor(() => receiver.succeeded.length >= 100, 30_000, 'a quarter delivered');
    const killedAtMs = Date.now();
    await redis!.kill();
    // The outage is the fault injected: it lasts this long whatever happens meanwhile.
    await new Promise((resolve) => setTimeout(resolve, 5_000));
    const restartedAtMs = Date.now();
    await startRedis();

    await settles(() => new Set(receiver.succeeded).size >= TOTAL, 60_000);
    const tally = tallyDeliveries(new Set(acceptOrder), receiver.succeeded);
    const sentDuringOutage = receiver.arrivedAtMs.filter(
      (atMs) => atMs > killedAtMs + 1_000 && atMs < restartedAtMs,
    ).length;
    const outOfOrder = firsts(receiver.succeeded).filter((id, i) => id !== acceptOrder[i]).length;
    const resumedInMs = (receiver.arrivedAtMs.find((atMs) => atMs >= restartedAtMs) ?? Infinity) - restartedAtMs;
    reportFault('fifo-redis-outage-5s', tally, startedMs, {
      sent_during_outage: sentDuringOutage,
      out_of_order: outOfOrder,
      resumed_after_restart_ms: resumedInMs,
    });
    expect(tally.lost, 'every accepted event delivered').toBe(0);
    expect(sentDuringOutage, 'requests started while Redis was down').toBe(0);
    expect(firsts(receiver.succeeded), 'first successful receipts in accept order').toEqual(acceptOrder);
    // At most the head in flight when Redis died is sent twice.
    expect(tally.duplicated).toBeLessThanOrEqual(2);
    // The lease was given back once Redis answered, not left to its end.
    expect(resumedInMs).toBeLessThan(5_000);
  }, 120_000);

  it('SIGTERM to the worker driving the line: it finishes the head in flight, exits 0 and gives the lease back, so the other goes on at once', async () => {
    const startedMs = Date.now();
    const TOTAL = 300;
    const { workers, acceptOrder } = await startLine({
      flaky: new FlakyReceiver(0, 20),
      retryScheduleMs: [0, 100],
      // A lease of 10 s: were it left to expire, the line would stand still that long.
      workerEnv: { HOOKLINE_WORKER_LOCK_DURATION: '10s' },
      total: TOTAL,
    });
    // The 60th request is held for a second: its sender is stopped while the head is in flight.
    receiver.holdAt(60, 1_000);
    const held = await waitFor(() => receiver.held, 20_000, 'the held request');
    const stopping = workers.find((w) => ownsLocalPort(w.child.pid!, held.remotePort))!;
    expect(stopping, 'the worker that sent the held request').toBeDefined();
    const stoppedAtMs = Date.now();
    stopping.child.kill('SIGTERM');
    expect(await stopping.exited).toBe(0);
    expect(stopping.output()).toContain('in-flight deliveries finished');
    await settles(() => new Set(receiver.succeeded).size >= TOTAL, 30_000);
    // From the stop on: the held second, then the other worker taking the line over.
    const gapMs = longestGapMs(receiver.arrivedAtMs, stoppedAtMs);
    const tally = tallyDeliveries(new Set(acceptOrder), receiver.succeeded);
    reportFault('fifo-sigterm', tally, startedMs, { longest_gap_after_sigterm_ms: gapMs });
    expect(tally.lost).toBe(0);
    expect(tally.duplicated, 'the head in flight finished, not repeated').toBe(0);
    expect(firsts(receiver.succeeded)).toEqual(acceptOrder);
    expect(gapMs, 'the lease was given back, not left to expire').toBeLessThan(1_000 + 2_000);
  }, 90_000);
  it('an ordering key: 800 events over 8 machine ids, a receiver failing 20 % at random, two workers, one SIGKILLed mid-run: first successes in accept order per machine id, none lost', async () => {
    const startedMs = Date.now();
    const TOTAL = 800;
    const machineIds = machineIdsOfDistinctLines(8);
    const pick = lcg(3);
    const keyOf = Array.from({ length: TOTAL }, () => machineIds[Math.floor(pick() * machineIds.length)]!);
    const keyed = new KeyedReceiver(0.2);
    const { workers, acceptOrder } = await startLine({
      flaky: keyed,
      // As the single line above: ten attempts 20 ms apart; a killed worker's leases end within 4 s.
      retryScheduleMs: [0, 20, 20, 20, 20, 20, 20, 20, 20, 20],
      workerEnv: { HOOKLINE_DELIVERY_TIMEOUT: '2s' },
      total: TOTAL,
      keyed: { orderingKey: 'data.metadata.machine_id', machineIdOf: (i) => keyOf[i]! },
    });

    // About a third of the way, one request is held and the worker that sent it killed, holding the
    // lease of that line (and of any other line it drove) with a head in flight.
    const HOLD_AT = Math.round((TOTAL * 1.25) / 3);
    keyed.holdAt(HOLD_AT, 3_000);
    const held = await waitFor(() => keyed.held, 40_000, 'the held request');
    const victim = workers.find((w) => ownsLocalPort(w.child.pid!, held.remotePort));
    expect(victim, 'the worker that sent the held request').toBeDefined();
    const killedAtMs = Date.now();
    victim!.child.kill('SIGKILL');
    expect(await victim!.exited).toBeNull();
    const atKill = new Set(keyed.succeeded.map((r) => r.eventId)).size;

    await settles(() => new Set(keyed.succeeded.map((r) => r.eventId)).size >= TOTAL, 45_000);
    const tally = tallyDeliveries(
      new Set(acceptOrder),
      keyed.succeeded.map((r) => r.eventId),
    );
    const acceptOrderOf = (machineId: string) => acceptOrder.filter((_, i) => keyOf[i] === machineId);
    const outOfOrder = machineIds.filter(
      (machineId) => JSON.stringify(keyed.firstSuccessesOf(machineId)) !== JSON.stringify(acceptOrderOf(machineId)),
    ).length;
    reportFault('fifo-key-sigkill', tally, startedMs, {
      machine_ids: machineIds.length,
      delivered_before_kill: atKill,
      failed_answers: keyed.received.length - keyed.succeeded.length,
      machine_ids_out_of_order: outOfOrder,
      longest_gap_after_kill_ms: longestGapMs(keyed.arrivedAtMs, killedAtMs),
    });
    expect(tally.lost, 'every accepted event delivered').toBe(0);
    for (const machineId of machineIds)
      expect(keyed.firstSuccessesOf(machineId), `${machineId}: first successful receipts in accept order`).toEqual(
        acceptOrderOf(machineId),
      );
    // The killed worker's head in flight was sent again, after the kill.
    expect(keyed.received.slice(HOLD_AT).map((r) => r.eventId)).toContain(held.eventId);
    await noHeadLeft(t);
  }, 120_000);
});
