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
  return perPartition.flat().map(([, fields]) => {
    const at = fields.indexOf('b');
    if (at < 0 || at + 1 >= fields.length) throw new Error('a first-attempt entry without its batch field');
    return (JSON.parse(fields[at + 1]!) as { deliveries: DeliverJob[] }).deliveries;
  });
}
