import { createHmac, randomBytes } from 'node:crypto';
import { Queue, Worker, type Job } from 'bullmq';
import { Agent, request } from 'undici';
import { connectRedis } from '../src/store/redis.js';
import { wallMs } from './measure.js';
import { deleteKeys } from './redis-info.js';
import type { ReceiverRun } from './receiver-client.js';
import { runParallel } from './workload.js';

/** What a hand-written delivery job carries: where to, its id, and the pre-built body. */
interface NaiveJob {
  id: string;
  target: number;
  url: string;
  body: string;
}

export interface ThroughputFigures {
  deliveries: number;
  /** First POST or addBulk → last verified delivery. */
  seconds: number;
  perSecond: number;
  duplicates: number;
  /**
   * CPU per delivery over the measured run: this process (everything in it, all threads) and Redis.
   * Less sensitive than rates to other load on the machine.
   */
  processCpuUsPerDelivery: number;
  redisCpuUsPerDelivery: number;
  /** Redis commands per delivery over the measured run, a script call and the commands inside it each counting. */
  redisCommandsPerDelivery: number;
}

/**
 * The naive baseline: the BullMQ worker someone would write by hand. A plain Queue and Worker on the
 * same Redis (own prefix), concurrency C, jobs with a pre-built body added with addBulk in batches,
 * and a processor that POSTs with one undici Agent and an `x-webhook-signature: sha256=<hmac>` header.
 * No ingest, matching, logging or metrics.
 */
export class NaiveBaseline {
  private readonly prefix = `bench-naive-${randomBytes(4).toString('hex')}`;
  private readonly connection;
  private readonly workerConnection;
  private readonly queue: Queue<NaiveJob>;
  private readonly worker: Worker<NaiveJob>;
  private readonly agent: Agent;
  private added = 0;

  constructor(
    redisUrl: string,
    private readonly run: ReceiverRun,
    private readonly options: { concurrency: number; targets: number; body: string; batchSize: number; adders: number },
  ) {
    this.connection = connectRedis(redisUrl, {
      connectionName: `${this.prefix}-queue`,
      maxRetriesPerRequest: null,
      autoPipelining: false,
    });
    this.workerConnection = connectRedis(redisUrl, {
      connectionName: `${this.prefix}-worker`,
      maxRetriesPerRequest: null,
      autoPipelining: false,
    });
    this.queue = new Queue<NaiveJob>('deliveries', { connection: this.connection, prefix: this.prefix });
    this.agent = new Agent({ connections: options.concurrency });
    const secrets = run.secrets;
    this.worker = new Worker<NaiveJob>(
      'deliveries',
      async (job: Job<NaiveJob>) => {
        const { id, target, url, body } = job.data;
        const signature = createHmac('sha256', secrets[target]!).update(body).digest('hex');
        const response = await request(url, {
          dispatcher: this.agent,
          method: 'POST',
          headers: {
            'content-type': 'application/json',
            'x-delivery-id': id,
            'x-webhook-signature': `sha256=${signature}`,
          },
          body,
        });
        await response.body.dump();
        if (response.statusCode < 200 || response.statusCode >= 300)
          throw new Error(`receiver answered ${response.statusCode}`);
      },
      { connection: this.workerConnection, prefix: this.prefix, concurrency: options.concurrency },
    );
    this.worker.on('error', () => undefined);
  }

  /** Adds `count` jobs with addBulk (`batchSize` per call, `adders` calls in flight); answers when the first call went out. */
  async add(count: number): Promise<number> {
    const { targets, body, batchSize, adders } = this.options;
    const first = this.added;
    this.added += count;
    const batches = Array.from({ length: Math.ceil(count / batchSize) }, (_, b) => {
      const start = first + b * batchSize;
      return Array.from({ length: Math.min(batchSize, first + count - start) }, (_, i) => {
        const n = start + i;
        const target = n % targets;
        return {
          name: 'deliver',
          data: { id: `naive-${n}`, target, url: this.run.url(target), body },
          opts: {
            attempts: 10,
            backoff: { type: 'exponential', delay: 1_000 },
            removeOnComplete: true,
            removeOnFail: 1_000,
          },
        };
      });
    });
    const startedAtMs = wallMs();
    await runParallel(batches, adders, async (batch) => {
      await this.queue.addBulk(batch);
    });
    return startedAtMs;
  }

  async close(): Promise<void> {
    await this.worker.close();
    await this.queue.close();
    await this.agent.close();
    await deleteKeys(this.connection, `${this.prefix}:*`);
    await Promise.all([this.connection.quit(), this.workerConnection.quit()]);
  }
}

/**
 * The bare undici loop: `concurrency` loops POSTing the same signed body to the receiver through one
 * Agent, no Redis at all. Answers when the first request went out.
 */
export async function bareUndiciLoop(
  run: ReceiverRun,
  options: { concurrency: number; targets: number; body: string; count: number; firstId: number },
): Promise<number> {
  const agent = new Agent({ connections: options.concurrency });
  // The same body every time, so one signature per target serves every request.
  const signatures = run.secrets
    .slice(0, options.targets)
    .map((secret) => `sha256=${createHmac('sha256', secret).update(options.body).digest('hex')}`);
  const urls = Array.from({ length: options.targets }, (_, i) => run.url(i));
  let next = 0;
  const startedAtMs = wallMs();
  const loop = async () => {
    while (next < options.count) {
      const n = options.firstId + next++;
      const target = n % options.targets;
      const response = await request(urls[target]!, {
        dispatcher: agent,
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'x-delivery-id': `bare-${n}`,
          'x-webhook-signature': signatures[target]!,
        },
        body: options.body,
      });
      await response.body.dump();
      if (response.statusCode < 200 || response.statusCode >= 300)
        throw new Error(`receiver answered ${response.statusCode}`);
    }
  };
  try {
    await Promise.all(Array.from({ length: options.concurrency }, loop));
  } finally {
    await agent.close();
  }
  return startedAtMs;
}
