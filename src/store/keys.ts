/**
 * The one place Redis key names are built. Every key starts with `{<prefix>:` and carries a hash tag,
 * so keys that one script or transaction touches together share a Redis Cluster slot.
 */
export function redisKeys(prefix: string) {
  const tag = (area: string) => `{${prefix}:${area}}`;
  const ingestTag = (n: number) => (n === 0 ? tag('ingest') : tag(`ingest:${n}`));
  return {
    /** SCAN pattern matching every key of this prefix (tests and tooling). */
    all: `{${prefix}:*`,
    apiKeys: {
      /** hash: sha256(key) → key record JSON */
      byHash: `${tag('keys')}:by-hash`,
      /** hash: key id → sha256(key) */
      hashById: `${tag('keys')}:hash-by-id`,
    },
    webhooks: {
      /** hash: webhook id → webhook record JSON */
      byId: `${tag('webhooks')}:by-id`,
      /** hash: `${vendorId}\n${eventType}` → webhook id; the uniqueness index and the matcher's lookup */
      byVendorType: `${tag('webhooks')}:by-vendor-type`,
      /** set of one vendor's webhook ids */
      ofVendor: (vendorId: string) => `${tag('webhooks')}:vendor:${vendorId}`,
      /** set of the ids of webhooks with `ordering: fifo`; the matcher's lookup reads it beside the index */
      fifo: `${tag('webhooks')}:fifo`,
      /** hash: FIFO webhook id → its ordering key (a path into the envelope), for those that have one; read beside the FIFO set */
      orderingKeys: `${tag('webhooks')}:ordering-keys`,
      /** pub/sub channel: a webhook was created, changed or deleted, so processes drop their copies of it */
      changes: `${tag('webhooks')}:changes`,
    },
    /** string per OAuth2 client (an opaque id of its token URL and credentials): its access token, sealed, expiring with it */
    receiverToken: (clientId: string) => `${tag('receiver-tokens')}:${clientId}`,
    machines: {
      /** hash: machine id → Machine JSON */
      docs: `${tag('machines')}:docs`,
      /** hash: machine id → compact index record JSON */
      index: `${tag('machines')}:index`,
      /** hash: machine id → version (event time, ms) of the last applied write, removals included */
      versions: `${tag('machines')}:versions`,
      /** sorted set: removed machine id → removal version; bounds how long `versions` keeps tombstones */
      tombstones: `${tag('machines')}:tombstones`,
      /** stream of changed machine ids; listing processes tail it to keep their in-memory index fresh */
      changes: `${tag('machines')}:changes`,
    },
    readModels: {
      /**
       * stream: ingest's changes to the read models (machines, agent statuses, tasks), one entry per
       * ingest batch, read by the projectors' consumer group; an entry is deleted once projected, so
       * its length is the projection's backlog (see read-model-feed.ts)
       */
      projection: `${tag('read-models')}:projection`,
    },
    events: {
      /** stream producers may XADD events to; consumed by the group below */
      stream: `${ingestTag(0)}:events`,
      /**
       * ingest stream `n` (HOOKLINE_INGEST_STREAMS): stream 0 is the one above, the others each
       * their own hash tag, so producers spread over a cluster's shards by appending to several
       */
      streamOf: (n: number) => `${ingestTag(n)}:events`,
      /**
       * stream, capped: the entries of ingest stream `n` that could not be ingested, each with its
       * reason; on the stream's own slot, so an entry is moved and acknowledged in one transaction
       */
      deadOf: (n: number) => `${ingestTag(n)}:dead`,
    },
    /**
     * The scratch keys of a stream's compaction (see stream-erasure.ts), beside it in its hash tag:
     * `copy`, the fresh stream that takes its place; `lock`, string with a TTL, the compaction's token
     */
    streamCompaction: (stream: string) => ({ copy: `${stream}:compacting`, lock: `${stream}:compacting:lock` }),
    /** BullMQ prefix of delivery queue partition `n`: every key of one queue shares this hash tag */
    deliveryQueuePrefix: (partition: number) => tag(`q${partition}`),
    firstAttempts: {
      /**
       * stream: ingest's batches of first attempts for queue partition `n`, one entry each (per
       * delivery a field `d`, its JSON without the body, then `p`, the body), read by the workers'
       * consumer group; an entry is deleted once its batch has run, so its length is the
       * partition's backlog of batches
       */
      streamOf: (partition: number) => `${tag(`q${partition}`)}:first`,
      /** stream, capped: entries of stream `n` that held no readable batch, kept with their reason */
      failedOf: (partition: number) => `${tag(`q${partition}`)}:first:failed`,
    },
    /** BullMQ prefix of the control queue (bulk replays) */
    controlQueuePrefix: tag('control'),
    deliveries: {
      /** sorted set: delivery id → accepted time (ms), a webhook's recent deliveries */
      ofWebhook: (webhookId: string) => `${tag(`wh:${webhookId}`)}:deliveries`,
      /** hash: the delivery record (ids, status, last outcome, `attempt:<n>` JSON per attempt; the body once dead) */
      record: (webhookId: string, deliveryId: string) => `${tag(`wh:${webhookId}`)}:delivery:${deliveryId}`,
      /** sorted set: dead-lettered delivery id → time (ms) */
      dead: (webhookId: string) => `${tag(`wh:${webhookId}`)}:dead`,
      /** string: when (ms) the webhook's current run of failed attempts began; absent after a success */
      failingSince: (webhookId: string) => `${tag(`wh:${webhookId}`)}:failing-since`,
      /** string with TTL: JSON of the circuit a worker opened on the webhook's endpoint; absent once closed */
      circuit: (webhookId: string) => `${tag(`wh:${webhookId}`)}:circuit`,
      /** hash with an expiry: the send window of a rate-limited webhook (sends per 50 ms slot, defer; µs; see domain/rate-limit.ts) */
      sendRate: (webhookId: string) => `${tag(`wh:${webhookId}`)}:send-rate`,
      /** list with an expiry: the bodies of the last events ingest matched to a webhook with a payload filter, newest first (filter-test) */
      recentEvents: (webhookId: string) => `${tag(`wh:${webhookId}`)}:recent-events`,
      /**
       * stream with an expiry: the webhook's event log, one small entry per event ingest matched to it
       * (`d` delivery id, `e` event id, `t` event type), in accept order; the entry id is the feed's
       * cursor and its time the accept time. Trimmed to the retention period (see event-log.ts).
       */
      log: (webhookId: string) => `${tag(`wh:${webhookId}`)}:log`,
      /** hash with an expiry: delivery id → the body of each event in the log (apart, so an erasure frees it) */
      logBodies: (webhookId: string) => `${tag(`wh:${webhookId}`)}:log:bodies`,
      /**
       * hash with an expiry: delivery id → the final status (delivered, dead) of each event in the log
       * that has one; a first attempt delivered with no record of its own keeps its record here, compact
       * (`delivered\t<event type>\t<status code>\t<at ms>\n` and JSON; see delivery-log.ts)
       */
      logStatuses: (webhookId: string) => `${tag(`wh:${webhookId}`)}:log:status`,
      /**
       * stream: journal shard `n` of the delivery log, concluded first attempts that need no record of
       * their own, one entry per worker flush (see attempt-journal.ts); empty once projected
       */
      journal: (shard: number) => `${tag(`q${shard}`)}:attempts`,
      /** string with a TTL: the process projecting journal shard `n` (its lease) */
      journalLease: (shard: number) => `${tag(`q${shard}`)}:attempts:lease`,
      /** sorted set with an expiry: the delayed jobs holding deliveries while the webhook is paused (`s:`/`p:` + job id) → when each hold ends (ms) */
      held: (webhookId: string) => `${tag(`wh:${webhookId}`)}:held`,
    },
    /**
     * FIFO webhooks' lines (see store/fifo-lines.ts), under the hash tag of the webhook's queue
     * partition, beside the partition's ready set, so that one script writes a line and its ready
     * entry together (one Redis Cluster slot). `line` is a line id (lineIdOf): the webhook id for
     * the webhook's own line, `<webhook id>:k<n>` for bucket n of its ordering key. Every key of a
     * line goes with its last delivery (the lease with its turn), so an empty line has none.
     */
    fifo: {
      /** counter: a line's accept sequence (INCR), the score of each delivery appended; deleted when the line empties */
      seq: (partition: number, line: string) => `${tag(`q${partition}`)}:fifo:${line}:seq`,
      /** sorted set: delivery id → accept sequence; the head is the lowest */
      line: (partition: number, line: string) => `${tag(`q${partition}`)}:fifo:${line}:line`,
      /** hash: delivery id → its DeliverJob JSON, while it is in the line */
      jobs: (partition: number, line: string) => `${tag(`q${partition}`)}:fifo:${line}:jobs`,
      /** string with a TTL: the random token of the worker driving the line; absent: nobody */
      lease: (partition: number, line: string) => `${tag(`q${partition}`)}:fifo:${line}:lease`,
      /** sorted set: the partition's line ids with deliveries → when the line's head is due or its lease ends (ms) */
      ready: (partition: number) => `${tag(`q${partition}`)}:fifo-ready`,
      /**
       * sorted set: the partition's line ids with deliveries → since when the line's head has been
       * its head (ms); a paused webhook's lines are left out (see store/fifo-lines.ts)
       */
      heads: (partition: number) => `${tag(`q${partition}`)}:fifo-heads`,
    },
    /** A webhook's delivery stats (see endpoint-stats.ts), under the hash tag of its delivery log. */
    endpointStats: {
      /** hash with an expiry: one 10-minute slot's per-minute counts and latency histogram */
      slot: (webhookId: string, slot: number) => `${tag(`wh:${webhookId}`)}:stats:s:${slot}`,
      /** hash with an expiry: the counts and latency histogram of each clock hour of one quarter-day */
      quarter: (webhookId: string, quarter: number) => `${tag(`wh:${webhookId}`)}:stats:q:${quarter}`,
      /** string with a TTL: the newest attempt sent, `<startedAtMs>|<outcome>|<status>|<durationMs>` */
      last: (webhookId: string) => `${tag(`wh:${webhookId}`)}:stats:last`,
    },
    /** pub/sub channel of finished attempts, published only while a listener key exists (`hookline deliveries tail`) */
    attemptFeed: {
      channel: `${tag('feed')}:attempts`,
      /** string with TTL: set and refreshed by every listener */
      listening: `${tag('feed')}:listening`,
    },
    /** string with TTL: a receiver endpoint (by digest of its key: one vendor's origin) answered a worker lately; see endpoints.ts */
    endpointAnswered: (endpointDigest: string) => tag(`ep:${endpointDigest}`),
    /** A receiver endpoint's flow control (see endpoint-flow.ts), under the hash tag of its digest. */
    endpointFlow: {
      /** string with TTL: until when (ms) a Retry-After paused the endpoint; expires with the pause */
      pause: (endpointDigest: string) => `${tag(`ep:${endpointDigest}`)}:pause`,
      /** hash with an expiry: worker id → its concurrency limit and attempts in flight to the endpoint */
      limits: (endpointDigest: string) => `${tag(`ep:${endpointDigest}`)}:limits`,
      /** pub/sub channel: pauses, so every worker holds the endpoint back at once */
      pauses: `${tag('flow')}:pauses`,
    },
    /** counter with a 2 s TTL: requests made with one API key (by fingerprint) in one second */
    rateWindow: (fingerprint: string, second: number) => `${tag(`rl:${fingerprint}`)}:${second}`,
    /** counter with a 2 s TTL: requests from one client address that authenticated nothing, in one second */
    addressRateWindow: (address: string, second: number) => `${tag(`arl:${address}`)}:${second}`,
    /** counter with a 2 s TTL: events ingested with one API key (by key id) in one second */
    ingestRateWindow: (keyId: string, second: number) => `${tag(`irl:${keyId}`)}:${second}`,
    /** counter with a 2 s TTL: event log entries one vendor's range counts (dry runs) took in one second */
    replayCountWindow: (vendorId: string, second: number) => `${tag(`rcl:${vendorId}`)}:${second}`,
    task: (taskId: string) => tag(`task:${taskId}`),
    /** A bulk replay task's bookkeeping, beside its task document (same slot). */
    replayTask: {
      /** hash: vendorId, webhookId, delivered, failed, queuedAll */
      state: (taskId: string) => `${tag(`task:${taskId}`)}:replay`,
      /** set of `<deliveryId>` replays still without an outcome */
      open: (taskId: string) => `${tag(`task:${taskId}`)}:open`,
    },
    /**
     * The range replays' queue (see domain/replay-queue.ts), every key under one hash tag so one
     * script changes any of them. `vendors` is the turn order; each vendor's line and running set are
     * named by its id.
     */
    replayQueue: {
      /** list: vendor ids with replays waiting, in turn order */
      vendors: `${tag('replays')}:vendors`,
      /** list: one vendor's waiting replays (task ids), oldest first */
      waiting: (vendorId: string) => `${tag('replays')}:waiting:${vendorId}`,
      /** sorted set: one vendor's running replays (task id → when its lease ends, ms) */
      running: (vendorId: string) => `${tag('replays')}:running:${vendorId}`,
      /** sorted set: every running replay (task id → when its lease ends, ms), soonest first */
      leases: `${tag('replays')}:leases`,
      /** hash: running task id → the token of its lease */
      tokens: `${tag('replays')}:tokens`,
      /** hash: task id → vendor id, while waiting or running */
      owners: `${tag('replays')}:owners`,
      /** hash: task id → its lapsed leases, when it had some */
      tries: `${tag('replays')}:tries`,
      /** hash: task id → its run's job (JSON of a replay-range job), while waiting or running */
      jobs: `${tag('replays')}:jobs`,
    },
    agent: (deploymentId: string) => tag(`agent:${deploymentId}`),
    /** string: a known value sealed under the installation's secret key, which every start opens to check its key (see secret-probe.ts) */
    secretProbe: `${tag('meta')}:secret-probe`,
    /** hash: engine id → JSON of a running engine (pid, host, role, API address, shared settings, last refresh); see engines.ts */
    engines: `${tag('meta')}:engines`,
    portal: {
      /** hash with the session's TTL: vendor, permission, times, and digests of the link token and the cookie */
      session: (sessionId: string) => tag(`portal:${sessionId}`),
      /** sorted set: a vendor's session ids → expiry (ms), for revoking them all */
      ofVendor: (vendorId: string) => tag(`portal-vendor:${vendorId}`),
    },
  } as const;
}

export type RedisKeys = ReturnType<typeof redisKeys>;
