import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { fileURLToPath } from 'node:url';
import { waitUntil } from './measure.js';
import type { ReceiverReply, ReceiverRequest, RunConfig, RunStats } from './receiver-protocol.js';

const REPLY_TIMEOUT_MS = 30_000;
const START_TIMEOUT_MS = 30_000;

/** The receiver process (bench/receiver.ts) and its IPC: start one per bench run, close it at the end. */
export class ReceiverProcess {
  private nextId = 0;
  private readonly pending = new Map<
    number,
    { resolve(value: unknown): void; reject(error: Error): void; timer: NodeJS.Timeout }
  >();

  private constructor(
    private readonly child: ChildProcess,
    /** The main listener's port on 127.0.0.1. */
    readonly port: number,
  ) {
    child.on('message', (message: ReceiverReply) => {
      if (message.type !== 'reply') return;
      const waiter = this.pending.get(message.id);
      if (!waiter) return;
      this.pending.delete(message.id);
      clearTimeout(waiter.timer);
      if (message.ok) waiter.resolve(message.result);
      else waiter.reject(new Error(`receiver: ${message.error}`));
    });
    child.on('exit', () => {
      for (const waiter of this.pending.values()) {
        clearTimeout(waiter.timer);
        waiter.reject(new Error('the receiver process exited'));
      }
      this.pending.clear();
    });
  }

  /** Forks the receiver (TypeScript through tsx, without the parent's flags such as --cpu-prof). */
  static async start(): Promise<ReceiverProcess> {
    const child = fork(fileURLToPath(new URL('./receiver.ts', import.meta.url)), [], {
      execArgv: ['--import', import.meta.resolve('tsx')],
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    });
    const port = await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        reject(new Error(`the receiver did not start within ${START_TIMEOUT_MS} ms`));
      }, START_TIMEOUT_MS);
      child.once('error', reject);
      child.once('exit', (code) => reject(new Error(`the receiver exited during start-up (code ${code})`)));
      child.once('message', (message: ReceiverReply) => {
        clearTimeout(timer);
        if (message.type === 'ready') resolve(message.port);
        else reject(new Error('the receiver sent something other than ready first'));
      });
    });
    return new ReceiverProcess(child, port);
  }

  get origin(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  private call<T>(request: ReceiverRequest): Promise<T> {
    const id = this.nextId++;
    return new Promise<T>((resolve, reject) => {
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`the receiver did not answer ${request.type} within ${REPLY_TIMEOUT_MS} ms`));
      }, REPLY_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      this.child.send({ ...request, id });
    });
  }

  /** Starts a run: a fresh run id, one secret per target path. */
  async newRun(options: {
    scheme: RunConfig['scheme'];
    targets: number;
    recordTimes?: boolean;
    secret?: (index: number) => string;
    faults?: RunConfig['faults'];
    firstAnswerDelayMs?: number;
    capacity?: RunConfig['capacity'];
  }): Promise<ReceiverRun> {
    const runId = `r${randomBytes(5).toString('hex')}`;
    const secret = options.secret ?? (() => `whsec_${randomBytes(24).toString('base64')}`);
    const secrets = Array.from({ length: options.targets }, (_, i) => secret(i));
    await this.call({
      type: 'run',
      run: {
        runId,
        scheme: options.scheme,
        secrets,
        recordTimes: options.recordTimes ?? false,
        ...(options.faults ? { faults: options.faults } : {}),
        ...(options.firstAnswerDelayMs ? { firstAnswerDelayMs: options.firstAnswerDelayMs } : {}),
        ...(options.capacity ? { capacity: options.capacity } : {}),
      },
    });
    return new ReceiverRun(this, runId, secrets);
  }

  /** Opens `count` more listeners (separate origins) and answers their ports. */
  listen(count: number): Promise<number[]> {
    return this.call({ type: 'listen', count });
  }

  hang(prefixes: string[]): Promise<void> {
    return this.call({ type: 'hang', prefixes });
  }

  stats(runId: string): Promise<RunStats> {
    return this.call({ type: 'stats', runId });
  }

  times(runId: string): Promise<{ ids: string[]; atMs: number[] }> {
    return this.call({ type: 'times', runId });
  }

  forget(runId: string): Promise<void> {
    return this.call({ type: 'forget', runId });
  }

  async close(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    const exited = new Promise<void>((resolve) => this.child.once('exit', () => resolve()));
    const killTimer = setTimeout(() => this.child.kill('SIGKILL'), 10_000);
    await this.call({ type: 'close' }).catch(() => this.child.kill('SIGKILL'));
    await exited;
    clearTimeout(killTimer);
  }
}

/** One run's view of the receiver: its URLs, secrets and counts. */
export class ReceiverRun {
  constructor(
    private readonly receiver: ReceiverProcess,
    readonly runId: string,
    readonly secrets: readonly string[],
  ) {}

  /** The URL of target `index` on the main listener, or on another port. */
  url(index: number, port = this.receiver.port): string {
    return `http://127.0.0.1:${port}/${this.runId}/${index}`;
  }

  /** The URL of target `index` under the run's hanging prefix (see `hangAll`). */
  hangingUrl(index: number, port: number): string {
    return `http://127.0.0.1:${port}/${this.runId}/hang/${index}`;
  }

  /** From now on every `hangingUrl` of this run is held without an answer. */
  hangAll(): Promise<void> {
    return this.receiver.hang([`/${this.runId}/hang/`]);
  }

  stats(): Promise<RunStats> {
    return this.receiver.stats(this.runId);
  }

  times(): Promise<{ ids: string[]; atMs: number[] }> {
    return this.receiver.times(this.runId);
  }

  /**
   * Waits until `count` distinct deliveries have verified, or have finished without reaching the
   * receiver (`finishedUnsent`: the engine's dead letters, which no wait would bring); throws on a
   * failed signature or after `timeoutMs`.
   */
  async waitVerified(
    count: number,
    timeoutMs: number,
    what: string,
    finishedUnsent: () => number = () => 0,
  ): Promise<RunStats> {
    let last: RunStats | undefined;
    try {
      return await waitUntil(
        async () => {
          last = await this.stats();
          if (last.failed > 0) throw new Error(`${what}: ${last.failed} requests failed signature verification`);
          return last.verified + finishedUnsent() >= count ? last : undefined;
        },
        timeoutMs,
        `${what} (${count} verified deliveries)`,
        25,
      );
    } catch (error) {
      if (last && last.failed === 0) throw new Error(`${(error as Error).message}; ${last.verified} verified so far`);
      throw error;
    }
  }

  forget(): Promise<void> {
    return this.receiver.forget(this.runId);
  }
}
