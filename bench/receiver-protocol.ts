/** The IPC messages between the bench and its receiver process (bench/receiver.ts). */

/** How the receiver checks the requests of one run. */
export interface RunConfig {
  /** The first path segment of every URL of the run: `/<runId>/<index>` or `/<runId>/hang/<index>`. */
  runId: string;
  /** `standard`: Standard Webhooks headers (Hookline); `legacy`: `x-webhook-signature: sha256=<hex>` (baselines). */
  scheme: 'standard' | 'legacy';
  /** The secret of the target at path index i. */
  secrets: string[];
  /** Keep each id's receive time (for latency); off for throughput runs. */
  recordTimes: boolean;
  /**
   * A flaky receiver: this share of the run's requests is answered 500, and this share held without
   * an answer (the engine's timeout ends them); drawn at random per request. Absent: all answered.
   */
  faults?: { failRate: number; hangRate: number };
  /** Answer the run's first request only after this long (a receiver, or an engine, busy at first contact). */
  firstAnswerDelayMs?: number;
  /**
   * A receiver with a capacity, on the listener of `port`: it answers after `latencyMs` while at most
   * `inflight` of its requests are open, and 429 at once above that. Counted in `RunStats.capacity`,
   * `late` from `warmUpMs` after its first request on.
   */
  capacity?: { port: number; inflight: number; latencyMs: number; warmUpMs: number };
}

/** What a capacity receiver saw: requests answered and refused (429), in all and after its warm-up. */
export interface CapacityStats {
  accepted: number;
  throttled: number;
  lateAccepted: number;
  lateThrottled: number;
  /** Wall-clock ms of its first request and of its latest accepted one. */
  firstAtMs: number;
  lastAcceptedAtMs: number;
  /** Wall-clock ms of every accepted request, in order. */
  acceptedAtMs: number[];
  /** Most requests open at once (never above the capacity: the rest were refused). */
  mostInflight: number;
  /** Wall-clock ms of the latest verified request on the other listeners. */
  othersLastAtMs: number;
}

export interface RunStats {
  /** Distinct delivery ids whose signature verified. */
  verified: number;
  /** Requests whose signature did not verify (or that named no known target). */
  failed: number;
  /** Verified requests for an id already verified (at-least-once redeliveries). */
  duplicates: number;
  /** Requests held without an answer on a hanging path, or by the run's faults. */
  hung: number;
  /** Requests answered 500 by the run's faults. */
  refused: number;
  /** Wall-clock ms of the first and the latest verified request (0 before any). */
  firstAtMs: number;
  lastAtMs: number;
  /** Body bytes of verified requests. */
  bytes: number;
  /** A run with a capacity receiver: what it saw. */
  capacity?: CapacityStats;
}

export type ReceiverRequest =
  | { type: 'run'; run: RunConfig }
  /** Answer nothing, ever, to requests whose path starts with one of these. */
  | { type: 'hang'; prefixes: string[] }
  /** Open `count` more listeners (each a separate origin for the engine's breakers); answers their ports. */
  | { type: 'listen'; count: number }
  | { type: 'stats'; runId: string }
  /** The receive times of a run with recordTimes: parallel arrays of ids and wall-clock ms. */
  | { type: 'times'; runId: string }
  /** Drops a run's state and aborts its hanging requests. */
  | { type: 'forget'; runId: string }
  | { type: 'close' };

export type ReceiverReply =
  | { type: 'ready'; port: number }
  | { type: 'reply'; id: number; ok: true; result: unknown }
  | { type: 'reply'; id: number; ok: false; error: string };

export type ReceiverEnvelope = ReceiverRequest & { id: number };
