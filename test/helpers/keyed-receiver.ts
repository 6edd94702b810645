import { createServer, type Server } from 'node:http';
import { bucketOfKeyValue } from '../../src/domain/ordering-key.js';
import { closeServer, listenOnLoopback } from './http-server.js';

/** One request as a keyed receiver saw it: the event id (`webhook-id`) and the machine id of its body. */
export interface KeyedReceipt {
  eventId: string;
  key: string;
}

/**
 * A receiver for FIFO webhooks ordered by `data.metadata.machine_id`: it fails a share of the
 * requests at random (500), and every request of a machine id in `failing` while it is there; it
 * records, in order, what it received and what it answered 200 to a sender still there to read it.
 * One request (see holdAt) may be held before its answer.
 */
export class KeyedReceiver {
  /** Machine ids whose every request is answered 500 while they are in the set. */
  readonly failing = new Set<string>();
  /** Every request, in arrival order. */
  readonly received: KeyedReceipt[] = [];
  /** When each request arrived (ms), in arrival order. */
  readonly arrivedAtMs: number[] = [];
  /** Every request answered 200, in the order of the answers. */
  readonly succeeded: KeyedReceipt[] = [];
  /** The request held (its receipt, and the sender's port: whose connection it came on). */
  held: (KeyedReceipt & { remotePort: number }) | undefined;
  private hold: { at: number; ms: number } | undefined;
  private readonly server: Server = createServer((request, response) => {
    const chunks: Buffer[] = [];
    request.on('data', (chunk: Buffer) => chunks.push(chunk));
    request.on('end', () => {
      const body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as {
        data?: { metadata?: { machine_id?: string } };
      };
      const receipt = { eventId: String(request.headers['webhook-id']), key: body.data?.metadata?.machine_id ?? '' };
      this.received.push(receipt);
      this.arrivedAtMs.push(Date.now());
      const held = this.hold?.at === this.received.length;
      if (held) this.held = { ...receipt, remotePort: request.socket.remotePort ?? 0 };
      else if (this.failing.has(receipt.key) || this.random() < this.failureRate)
        return void response.writeHead(500).end();
      const answer = () => {
        // A sender killed meanwhile never learns of the answer: no success.
        if (request.socket.destroyed) return;
        this.succeeded.push(receipt);
        response.writeHead(200).end();
      };
      if (held) setTimeout(answer, this.hold!.ms);
      else answer();
    });
  });

  constructor(
    private readonly failureRate: number,
    private readonly random: () => number = Math.random,
  ) {}

  /** Holds the `at`-th request (1-based) for `ms` before answering it 200. */
  holdAt(at: number, ms: number): void {
    this.hold = { at, ms };
  }

  /** The event ids answered 200, each once at its first success, of machine id `key`. */
  firstSuccessesOf(key: string): string[] {
    return [...new Set(this.succeeded.filter((r) => r.key === key).map((r) => r.eventId))];
  }

  start(): Promise<string> {
    return listenOnLoopback(this.server);
  }

  close(): Promise<void> {
    return closeServer(this.server);
  }
}

/**
 * `n` machine ids whose ordering-key values fall in `n` different buckets, so each has a line of its
 * own (ids sharing a bucket would share a line, and hold each other back).
 */
export function machineIdsOfDistinctLines(n: number): string[] {
  const buckets = new Set<number>();
  const ids: string[] = [];
  for (let i = 0; ids.length < n && i < 100_000; i++) {
    const id = `m-${i}`;
    const bucket = bucketOfKeyValue(JSON.stringify(id));
    if (buckets.has(bucket)) continue;
    buckets.add(bucket);
    ids.push(id);
  }
  return ids;
}
