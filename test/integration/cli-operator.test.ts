import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureRedisServerBinary, startRedisServer } from '../../src/embedded/redis-server.js';
import { RedisAttemptFeed, type FeedEntry } from '../../src/store/attempt-feed.js';
import { redisKeys } from '../../src/store/keys.js';
import { connectRedis } from '../../src/store/redis.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { runCli, startCli } from '../helpers/cli.js';
import { machineEvent } from '../helpers/events.js';
import { cleanEnv } from '../helpers/processes.js';
import { receiverPool } from '../helpers/receiver.js';
import { waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

describe('the operator CLI: webhooks list, webhooks enable, dlq list across webhooks, deliveries tail', () => {
  let t: TestApp | undefined;
  let worker: TestWorker | undefined;
  const receivers = receiverPool();
  const children: { kill(signal: NodeJS.Signals): boolean }[] = [];

  afterEach(async () => {
    for (const child of children.splice(0)) child.kill('SIGKILL');
    await worker?.close();
    worker = undefined;
    await receivers.closeAll();
    // Undefined after: a test without an app of its own must not close the previous test's again.
    await t?.close();
    t = undefined;
  });

  async function setup() {
    t = await testApp({ retryScheduleMs: [0, 100] });
    const healthy = await receivers.start();
    const failing = await receivers.start();
    failing.script('/bad', { status: 503 });
    const ok = await t.webhooks.create('vendor-ok', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${healthy.base}/ok`,
    });
    const bad = await t.webhooks.create('vendor-bad', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: `${failing.base}/bad`,
    });
    if (!ok.ok || !bad.ok) throw new Error('webhooks not created');
    worker = await startTestWorker(t, {
      sustainedFailureWindowMs: 24 * 3_600_000,
      breaker: { failureThreshold: 1_000, failureRate: 1, minAttempts: 1_000 },
    });
    const env = {
      ...cleanEnv(),
      REDIS_URL: t.url,
      HOOKLINE_REDIS_PREFIX: t.prefix,
      HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
      HOOKLINE_QUEUE_PARTITIONS: String(t.config.queuePartitions),
    };
    return { env, okId: ok.webhook.id, badId: bad.webhook.id, failing };
  }

  it('finds the failing webhook across vendors, lists its dead letters by vendor, and enables it again', async () => {
    const { env, okId, badId } = await setup();
    await t!.ingestor.ingest(
      [machineEvent('vendor-ok'), machineEvent('vendor-bad'), machineEvent('vendor-bad')],
      'http',
    );
    await waitFor(async () => (await t!.deliveryLog.health([badId]))[0]?.deadLetters === 2, 15_000, 'two dead letters');

    const listed = await runCli(['webhooks', 'list'], env);
    expect(listed.code).toBe(0);
    const lines = listed.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^STATE\s+DEAD\s+LAST\s+FAILING SINCE\s+VENDOR\s+EVENT TYPE\s+WEBHOOK\s+CALLBACK$/);
    // Failing first, with its dead letters and last outcome.
    expect(lines[1]).toMatch(
      new RegExp(
        `^failing\\s+2\\s+http_5xx 503 \\d+s ago\\s+\\d+s ago\\s+vendor-bad\\s+EVENT_TYPE_MACHINE_CREATED\\s+${badId}`,
      ),
    );
    expect(lines[2]).toMatch(new RegExp(`^healthy\\s+0\\s+delivered 200 .*vendor-ok.*${okId}`));

    const failingOnly = await runCli(['webhooks', 'list', '--failing', '--json'], env);
    const parsed = (
      JSON.parse(failingOnly.stdout) as {
        webhooks: { webhook_id: string; state: string; dead_letters: number; failing_since: string }[];
      }
    ).webhooks;
    expect(parsed.map((w) => [w.webhook_id, w.state, w.dead_letters])).toEqual([[badId, 'failing', 2]]);
    expect(Number.isFinite(Date.parse(parsed[0]!.failing_since))).toBe(true);
    expect((await runCli(['webhooks', 'list', '--vendor', 'vendor-ok', '--failing'], env)).stderr).toContain(
      'no webhooks match',
    );

    const byVendor = await runCli(['dlq', 'list', '--vendor', 'vendor-bad', '--json'], env);
    expect(byVendor.code).toBe(0);
    const dead = (
      JSON.parse(byVendor.stdout) as {
        dead_letters: { webhook_id: string; vendor_id: string; status: string; last_status_code: number }[];
      }
    ).dead_letters;
    expect(dead.map((d) => [d.webhook_id, d.vendor_id, d.status, d.last_status_code])).toEqual([
      [badId, 'vendor-bad', 'dead', 503],
      [badId, 'vendor-bad', 'dead', 503],
    ]);
    const all = await runCli(['dlq', 'list', '--all'], env);
    expect(all.stdout.trim().split('\n')).toHaveLength(3);
    expect(all.stdout).toContain('http_5xx 503');

    await t!.webhooks.disable(badId, 'failing');
    const enabled = await runCli(['webhooks', 'enable', badId], env);
    expect(enabled.code).toBe(0);
    expect(enabled.stderr).toContain(`enabled ${badId} (was disabled: failing)`);
    expect((await t!.webhooks.getById(badId))?.disabled).toBeUndefined();
    const unknown = await runCli(['webhooks', 'enable', randomUUID()], env);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('no webhook with id');

    // A bulk replay not yet run is cancelled from the CLI; it then replays nothing, and a second cancel is refused.
    const taskId = await t!.replayer.createTask('vendor-bad', badId);
    const cancelled = await runCli(['dlq', 'cancel', '--task', taskId], env);
    expect(cancelled.code, cancelled.stderr).toBe(0);
    expect(cancelled.stderr).toContain(`cancelled ${taskId}`);
    expect(await t!.replayer.runReplayAll(taskId, badId)).toEqual({ replayed: 0, skipped: 0 });
    expect(await t!.deliveryLog.deadLetterCount(badId)).toBe(2);
    expect((await runCli(['dlq', 'cancel', '--task', randomUUID()], env)).code).toBe(2);
  }, 90_000);

  it('deliveries tail streams attempts as they finish, only the vendor asked for, until interrupted', async () => {
    const { env, badId, failing } = await setup();
    const tail = await startCli(
      ['deliveries', 'tail', '--vendor', 'vendor-bad', '--json'],
      env,
      /watching delivery attempts/,
    );
    children.push(tail.child);
    const entries = () =>
      tail
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map(
          (line) =>
            JSON.parse(line) as {
              vendor_id: string;
              webhook_id: string;
              outcome: string;
              status_code: number;
              attempt: number;
              decision: string;
            },
        );
    // Workers notice a new listener within a second: keep events coming until attempts show (bounded).
    await waitFor(
      async () => {
        await t!.ingestor.ingest([machineEvent('vendor-ok'), machineEvent('vendor-bad')], 'http');
        // A first attempt that is retried and a last one that dead-letters (the first events may
        // have had their first attempt before the workers saw the listener).
        return (
          entries().some((e) => e.decision === 'dead') &&
          entries().some((e) => e.attempt === 1 && e.decision === 'retry')
        );
      },
      15_000,
      'a retried first attempt and a dead letter in the tail',
      300,
    );
    expect(
      entries().every(
        (e) =>
          e.vendor_id === 'vendor-bad' && e.webhook_id === badId && e.outcome === 'http_5xx' && e.status_code === 503,
      ),
    ).toBe(true);
    // The fix lands: the tail shows it.
    failing.script('/bad', { status: 200 });
    await waitFor(
      async () => {
        await t!.ingestor.ingest([machineEvent('vendor-bad')], 'http');
        return entries().some((e) => e.outcome === 'delivered' && e.status_code === 200);
      },
      15_000,
      'a delivered attempt in the tail',
      300,
    );
    tail.child.kill('SIGINT');
    expect(await tail.exited).toBe(0);
  }, 60_000);

  it('deliveries tail shows the first attempt that finishes right after it says it is watching', async () => {
    const { env, badId } = await setup();
    const tail = await startCli(
      ['deliveries', 'tail', '--webhook', badId, '--json'],
      env,
      /watching delivery attempts/,
    );
    children.push(tail.child);
    // The worker has sent nothing yet: this attempt is the one that makes it look whether anyone listens.
    const event = machineEvent('vendor-bad');
    await t!.ingestor.ingest([event], 'http');
    const first = () =>
      tail
        .output()
        .split('\n')
        .filter((line) => line.startsWith('{'))
        .map((line) => JSON.parse(line) as { event_id: string; attempt: number })
        .find((e) => e.event_id === event.event_id && e.attempt === 1);
    await waitFor(first, 10_000, 'the event’s first attempt in the tail');
    tail.child.kill('SIGINT');
    expect(await tail.exited).toBe(0);
  }, 60_000);

  it('deliveries tail rides out a Redis restart with one line when the connection is lost and one when it is back, never a stack trace', async () => {
    const dir = mkdtempSync(path.join(tmpdir(), 'hookline-tail-'));
    const binary = await ensureRedisServerBinary(() => undefined);
    let server = await startRedisServer({ binary, port: 0, dir, appendOnly: false });
    const where = `redis://127.0.0.1:${server.port}`;
    const publisher = connectRedis(server.url, { connectionName: 'test-feed-publisher', maxRetriesPerRequest: 1 });
    publisher.on('error', () => undefined);
    try {
      const tail = await startCli(
        ['deliveries', 'tail', '--json'],
        { ...cleanEnv(), REDIS_URL: server.url },
        /watching delivery attempts/,
      );
      children.push(tail.child);
      let stderr = '';
      tail.child.stderr?.on('data', (chunk: Buffer) => (stderr += chunk.toString()));
      const said = (text: string) =>
        waitFor(() => stderr.includes(text), 15_000, `"${text}" on stderr; stderr so far:\n${stderr}`);

      await server.stop();
      await said('lost the connection');
      server = await startRedisServer({ binary, port: server.port, dir, appendOnly: false });
      await said('reconnected');

      // A delivery attempt published after the restart shows in the tail.
      const feed = new RedisAttemptFeed(publisher, redisKeys('hl'));
      const entry: FeedEntry = {
        at: new Date().toISOString(),
        vendor_id: 'vendor-after-restart',
        webhook_id: randomUUID(),
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        event_id: randomUUID(),
        delivery_id: randomUUID(),
        attempt: 1,
        outcome: 'delivered',
        status_code: 200,
        duration_ms: 4,
        decision: 'delivered',
      };
      await waitFor(
        () => {
          feed.publish(entry);
          feed.flush();
          return tail.output().includes(entry.delivery_id);
        },
        15_000,
        'an attempt published after the restart in the tail',
        300,
      );
      tail.child.kill('SIGINT');
      expect(await tail.exited).toBe(0);
      console.log(`deliveries tail across a restart, stderr:\n${stderr}`);
      expect(stderr).not.toContain('Unhandled error event');
      expect(stderr).not.toMatch(/^\s+at /m);
      expect(stderr.split('\n').filter((line) => line.startsWith('hookline:'))).toEqual([
        `hookline: lost the connection to Redis at ${where}; reconnecting…`,
        `hookline: reconnected to Redis at ${where}`,
      ]);
    } finally {
      publisher.disconnect();
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  }, 90_000);

  it('runs without HOOKLINE_SECRET_KEY, since no command opens a webhook secret, and ignores a wrong one', async () => {
    t = await testApp();
    const created = await t.webhooks.create('vendor-a', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
      secret: 'shh',
    });
    const signed = await t.webhooks.create('vendor-a', {
      eventType: 'EVENT_TYPE_MACHINE_UPDATED',
      callbackUrl: 'https://example.com/h',
      signature: 'ed25519',
    });
    if (!created.ok || !signed.ok) throw new Error('webhooks not created');
    const webhookId = created.webhook.id;
    const deliveryId = randomUUID();
    await t.deliveryLog.recordAttempt({
      job: {
        deliveryId,
        eventId: 'e1',
        eventType: 'EVENT_TYPE_MACHINE_CREATED',
        vendorId: 'vendor-a',
        webhookId,
        body: '{}',
        acceptedAtMs: 1_000,
      },
      attempt: { attempt: 1, atMs: 2_000, outcome: 'http_5xx', statusCode: 500, durationMs: 3 },
      status: 'dead',
    });
    const env = {
      ...cleanEnv(),
      REDIS_URL: t.url,
      HOOKLINE_REDIS_PREFIX: t.prefix,
      HOOKLINE_QUEUE_PARTITIONS: String(t.config.queuePartitions),
    };
    const wrongKey = { ...env, HOOKLINE_SECRET_KEY: randomBytes(32).toString('base64') };

    for (const [args, commandEnv] of [
      [['webhooks', 'list'], env],
      [['webhooks', 'list'], wrongKey],
      [['dlq', 'list', '--webhook', webhookId], env],
      [['dlq', 'replay', '--webhook', webhookId, '--delivery', deliveryId], wrongKey],
    ] as const) {
      const result = await runCli([...args], commandEnv);
      expect(result.code, `${args.join(' ')}: ${result.stderr}`).toBe(0);
      expect(result.stderr, args.join(' ')).not.toMatch(/HOOKLINE_SECRET_KEY|authenticate data|\n\s+at /);
      if (args[0] === 'webhooks') expect(result.stdout).toContain(webhookId);
    }
    const tail = await startCli(['deliveries', 'tail'], env, /watching delivery attempts/);
    children.push(tail.child);
    tail.child.kill('SIGINT');
    expect(await tail.exited).toBe(0);
    // The secrets are untouched, still sealed under the engine's key.
    expect((await t.webhooks.getById(webhookId))?.secret).toBe('shh');
  }, 90_000);

  it('portal link prints a one-time link to the API (or HOOKLINE_PUBLIC_URL); portal revoke ends sessions; bad usage exits 2', async () => {
    t = await testApp();
    const env = {
      ...cleanEnv(),
      REDIS_URL: t.url,
      HOOKLINE_REDIS_PREFIX: t.prefix,
      HOOKLINE_SECRET_KEY: t.secretKey.toString('base64'),
      HOOKLINE_API_PORT: '18080',
    };
    const linked = await runCli(
      ['portal', 'link', '--vendor', 'vendor-a', '--permission', 'replay', '--ttl', '2h'],
      env,
    );
    expect(linked.code, linked.stderr).toBe(0);
    // Issued all the same (a vendor may register its first webhook in the portal), with a word of warning.
    expect(linked.stderr).toContain(
      'note: vendor vendor-a has no webhooks (is the id right?); the portal will show none until it registers one',
    );
    const url = linked.stdout.trim();
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:18080\/portal\/#token=ps_[0-9a-f]{24}\.[A-Za-z0-9_-]{43}$/);
    // The audit line names the session, never the token.
    expect(linked.stderr).toContain('portal.session_issued');
    expect(linked.stderr).not.toContain(url.split('#token=')[1]!);
    const opened = await t.portalSessions.exchange(url.split('#token=')[1]!);
    expect(opened?.session).toMatchObject({ vendorId: 'vendor-a', permission: 'replay', issuedBy: 'cli' });
    expect(opened!.session.expiresAtMs - opened!.session.createdAtMs).toBe(2 * 3_600_000);

    await t.webhooks.create('vendor-a', {
      eventType: 'EVENT_TYPE_MACHINE_CREATED',
      callbackUrl: 'https://example.com/h',
    });
    const publicUrl = await runCli(['portal', 'link', '--vendor', 'vendor-a'], {
      ...env,
      HOOKLINE_PUBLIC_URL: 'https://hooks.example.com/',
    });
    expect(publicUrl.stdout.trim()).toMatch(/^https:\/\/hooks\.example\.com\/portal\/#token=ps_/);
    expect(publicUrl.stderr).not.toContain('has no webhooks');

    // An API on a wildcard address without HOOKLINE_PUBLIC_URL: no link (a loopback one would take the
    // vendor's browser nowhere), and no session is issued.
    const before = (await t.portalSessions.list('vendor-a')).length;
    const wildcard = await runCli(['portal', 'link', '--vendor', 'vendor-a'], { ...env, HOOKLINE_API_HOST: '0.0.0.0' });
    expect(wildcard.code).toBe(1);
    expect(wildcard.stdout).toBe('');
    expect(wildcard.stderr).toContain('HOOKLINE_PUBLIC_URL is not set and the API listens on 0.0.0.0');
    expect(await t.portalSessions.list('vendor-a')).toHaveLength(before);

    const one = await runCli(['portal', 'revoke', '--session', opened!.session.id], env);
    expect(one.code, one.stderr).toBe(0);
    expect(await t.portalSessions.authenticate(opened!.cookieValue)).toBeUndefined();
    const all = await runCli(['portal', 'revoke', '--vendor', 'vendor-a'], env);
    expect(all.stdout.trim()).toBe('1');

    for (const args of [
      ['portal', 'link'],
      ['portal', 'link', '--vendor', 'v', '--permission', 'admin'],
      ['portal', 'link', '--vendor', 'v', '--ttl', '30d'],
      ['portal', 'link', '--vendor', 'has space'],
      ['portal', 'revoke'],
      ['portal', 'revoke', '--session', 'nope'],
    ]) {
      const bad = await runCli(args, env);
      expect(bad.code, args.join(' ')).toBe(2);
      expect(bad.stderr, args.join(' ')).toMatch(/vendor|permission|ttl|session/);
    }
    // Eleven CLI processes, each starting Node with TypeScript from source.
  }, 90_000);
});
