import { RedisEventLog } from '../../src/store/event-log.js';
import type { DeliverJob } from '../../src/domain/delivery.js';
import type { TestApp } from './app.js';

/**
 * The batches waiting in the first-attempt streams (ingest's first attempts, until a worker runs
 * them), partition by partition, each entry's deliveries as ingest appended them.
 */
export async function firstAttemptBatches(t: TestApp): Promise<DeliverJob[][]> {
  const perPartition = await Promise.all(
    t.queues.partitions.map((_, n) => t.redis.xrange(t.keys.firstAttempts.streamOf(n), '-', '+')),
  );
  // Per delivery a `d` field (the delivery without its body, as JSON), then a `p` field (the body);
  // or an `l` field, the delivery whose body is in its webhook's event log.
  const log = new RedisEventLog(t.redis, t.keys, 24 * 3_600_000);
  return Promise.all(
    perPartition.flat().map(async ([, fields]) => {
      const deliveries: DeliverJob[] = [];
      const logged: DeliverJob[] = [];
      for (let i = 0; i + 1 < fields.length; i += 2) {
        if (fields[i] === 'd' || fields[i] === 'l') deliveries.push(JSON.parse(fields[i + 1]!) as DeliverJob);
        else if (fields[i] === 'p') deliveries.at(-1)!.body = fields[i + 1]!;
        else throw new Error(`a first-attempt entry with an unknown field ${fields[i]}`);
        if (fields[i] === 'l') logged.push(deliveries.at(-1)!);
      }
      const bodies = await log.bodiesOf(logged);
      logged.forEach((delivery, n) => (delivery.body = bodies[n] ?? ''));
      return deliveries;
    }),
  );
}
