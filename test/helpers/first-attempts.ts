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
  // Per delivery a `d` field (the delivery without its body, as JSON), then a `p` field (the body).
  return perPartition.flat().map(([, fields]) => {
    const deliveries: DeliverJob[] = [];
    for (let i = 0; i + 1 < fields.length; i += 2) {
      if (fields[i] === 'd') deliveries.push(JSON.parse(fields[i + 1]!) as DeliverJob);
      else if (fields[i] === 'p') deliveries.at(-1)!.body = fields[i + 1]!;
      else throw new Error(`a first-attempt entry with an unknown field ${fields[i]}`);
    }
    return deliveries;
  });
}
