import type { Command } from 'commander';
import { printJson, printTable, say } from './output.js';
import { outageNotices } from './stores.js';
import { operatorDeadLetters, toWebhookStatus } from '../admin/routes/operator.js';
import { EXTERNAL_ID_RE, isUuid } from '../domain/ids.js';
import { PORTAL_PERMISSIONS, type PortalPermission } from '../domain/roles.js';
import { portalLink } from '../domain/portal-link.js';
import { isSessionId, ttlMsOf, ttlProblem } from '../store/portal-sessions.js';
import type { Stores } from '../engine/index.js';
import type { FeedEntry } from '../store/attempt-feed.js';
import { WEBHOOK_STATES, type WebhookState } from '../store/operator-views.js';

/** What the operator commands need from the CLI around them. */
export interface OperatorCommandContext {
  withStores<T>(body: (stores: Stores, redisUrl: string) => Promise<T>): Promise<T>;
  /** An error whose message is the whole story for the user (exit 2). */
  usageError(message: string): Error;
  /** Resolves when the user interrupts (SIGINT/SIGTERM). */
  interrupted(): Promise<unknown>;
  /** Where browsers reach the API: HOOKLINE_PUBLIC_URL, else the API's listen address. */
  /** Where portal links point (HOOKLINE_PUBLIC_URL, else the API on loopback); throws when neither. */
  publicBaseUrl(): string;
  /** Writes an audit line (stderr), as the key commands do. */
  audit(fields: Record<string, unknown>, message: string): void;
}

const out = (line: string) => process.stdout.write(`${line}\n`);

function parseLimit(text: string, max: number, usageError: OperatorCommandContext['usageError']): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > max) throw usageError(`--limit must be a whole number from 1 to ${max}`);
  return n;
}

function checkVendor(vendor: string | undefined, usageError: OperatorCommandContext['usageError']): void {
  if (vendor !== undefined && !EXTERNAL_ID_RE.test(vendor))
    throw usageError('--vendor must be 1-128 characters: letters, digits and . _ : @ -');
}

function checkWebhookId(id: string | undefined, usageError: OperatorCommandContext['usageError']): string | undefined {
  if (id === undefined) return undefined;
  if (!isUuid(id)) throw usageError(`--webhook must be a webhook id (a UUID), not "${id.slice(0, 64)}"`);
  return id.toLowerCase();
}

const ago = (iso: string | null, nowMs: number) => {
  if (iso === null) return '-';
  const s = Math.max(0, Math.round((nowMs - Date.parse(iso)) / 1000));
  return s < 120
    ? `${s}s ago`
    : s < 7_200
      ? `${Math.round(s / 60)}m ago`
      : s < 172_800
        ? `${Math.round(s / 3_600)}h ago`
        : `${Math.round(s / 86_400)}d ago`;
};

/**
 * The operator's commands: webhooks across vendors with their state (`webhooks list`), enabling
 * any vendor's webhook (`webhooks enable`), dead letters of a webhook, a vendor or all (`dlq list`),
 * and a live stream of attempts (`deliveries tail`). `--json` prints the admin API's resources.
 */
export function addOperatorCommands(program: Command, dlq: Command, ctx: OperatorCommandContext): void {
  const usageError = (message: string) => ctx.usageError(message);
  const webhooks = program.command('webhooks').description('Every vendor’s webhooks with their state; enable one.');
  webhooks
    .command('list')
    .description('List webhooks across vendors, most urgent first: disabled, circuit open, failing, then the rest.')
    .option('--vendor <vendorId>', 'only this vendor’s webhooks')
    .option(
      '--failing',
      'only webhooks that need attention: disabled by the engine, circuit open, failing, or holding dead letters',
    )
    .option('--state <states>', `only these states, comma-separated (${WEBHOOK_STATES.join(', ')})`)
    .option('--json', 'print JSON (what GET /admin/v1/webhooks answers)')
    .action(async (options: { vendor?: string; failing?: boolean; state?: string; json?: boolean }) => {
      checkVendor(options.vendor, usageError);
      const states = options.state?.split(',');
      if (states && !states.every((s) => (WEBHOOK_STATES as readonly string[]).includes(s)))
        throw usageError(`--state takes ${WEBHOOK_STATES.join(', ')}`);
      await ctx.withStores(async (stores) => {
        const found = (
          await stores.operatorViews.webhooks({
            ...(options.vendor === undefined ? {} : { vendorId: options.vendor }),
            ...(options.failing ? { needsAttention: true } : {}),
            ...(states === undefined ? {} : { states: states as WebhookState[] }),
          })
        ).map(toWebhookStatus);
        if (options.json) return printJson({ total: found.length, webhooks: found });
        if (found.length === 0)
          return say(options.failing || states || options.vendor ? 'no webhooks match' : 'no webhooks');
        const nowMs = Date.now();
        printTable(
          ['STATE', 'DEAD', 'LAST', 'FAILING SINCE', 'VENDOR', 'EVENT TYPE', 'WEBHOOK', 'CALLBACK'],
          found.map((w) => [
            w.state === 'disabled' ? `disabled (${w.disabled_reason})` : w.state,
            String(w.dead_letters),
            w.last_outcome === null
              ? '-'
              : `${w.last_outcome}${w.last_status_code === null ? '' : ` ${w.last_status_code}`} ${ago(w.last_attempt_at, nowMs)}`,
            ago(w.failing_since, nowMs),
            w.vendor_id,
            w.event_type,
            w.webhook_id,
            w.callback_url,
          ]),
        );
      });
    });
  webhooks
    .command('enable')
    .description(
      'Enable any vendor’s webhook (one the engine disabled, or its vendor paused); its failure run starts over.',
    )
    .argument('<webhookId>', 'the webhook')
    .action(async (id: string) => {
      const webhookId = checkWebhookId(id, usageError)!;
      await ctx.withStores(async (stores) => {
        const webhook = await stores.webhooks.getById(webhookId);
        if (!webhook) throw usageError(`no webhook with id ${webhookId}`);
        const result = await stores.webhooks.update(webhook.vendorId, webhookId, { enabled: true });
        if (!result.ok) throw usageError(`no webhook with id ${webhookId}`);
        say(
          webhook.disabled
            ? `enabled ${webhookId} (was disabled: ${webhook.disabled.reason})`
            : `${webhookId} was enabled already`,
        );
      });
    });

  dlq
    .command('list')
    .description('List dead letters of one webhook, one vendor’s webhooks, or all, newest first.')
    .option('--webhook <webhookId>', 'one webhook’s dead letters')
    .option('--vendor <vendorId>', 'the dead letters of a vendor’s webhooks')
    .option('--all', 'every webhook’s dead letters')
    .option('--limit <n>', 'how many (1-1000)', '50')
    .option('--json', 'print JSON (what GET /admin/v1/dead-letters answers)')
    .action(async (options: { webhook?: string; vendor?: string; all?: boolean; limit: string; json?: boolean }) => {
      const scopes = [options.webhook, options.vendor, options.all].filter((o) => o !== undefined).length;
      if (scopes !== 1)
        throw usageError(
          'give exactly one of --webhook <id>, --vendor <vendorId> or --all (find webhook ids with `hookline webhooks list --failing`)',
        );
      const limit = parseLimit(options.limit, 1_000, usageError);
      const webhookId = checkWebhookId(options.webhook, usageError);
      checkVendor(options.vendor, usageError);
      await ctx.withStores(async (stores) => {
        if (webhookId !== undefined && !(await stores.webhooks.getById(webhookId)))
          throw usageError(`no webhook with id ${webhookId}`);
        const dead = await stores.operatorViews.deadLetters({
          limit,
          ...(webhookId === undefined ? {} : { webhookId }),
          ...(options.vendor === undefined ? {} : { vendorId: options.vendor }),
        });
        if (options.json) return printJson({ dead_letters: await operatorDeadLetters(stores.deliveryLog, dead) });
        if (dead.length === 0) return say('no dead letters');
        printTable(
          ['DEAD SINCE', 'DELIVERY', 'EVENT TYPE', 'ATTEMPTS', 'LAST', 'VENDOR', 'WEBHOOK'],
          dead.map((d) => [
            new Date(d.updatedAtMs).toISOString(),
            d.deliveryId,
            d.eventType,
            String(d.attempts),
            `${d.lastOutcome ?? '-'}${d.lastStatusCode === undefined ? '' : ` ${d.lastStatusCode}`}`,
            d.vendorId,
            d.webhookId,
          ]),
        );
      });
    });

  program
    .command('deliveries')
    .description('Watch deliveries as they happen.')
    .command('tail')
    .description(
      'Print every delivery attempt as it finishes (outcome, status, duration) until Ctrl-C; for watching a fix land. A Redis restart is reported in one line, its end in another.',
    )
    .option('--vendor <vendorId>', 'only this vendor’s attempts')
    .option('--webhook <webhookId>', 'only this webhook’s attempts')
    .option('--json', 'print one JSON object per attempt')
    .action(async (options: { vendor?: string; webhook?: string; json?: boolean }) => {
      checkVendor(options.vendor, usageError);
      const webhookId = checkWebhookId(options.webhook, usageError);
      const wanted = (e: FeedEntry) =>
        (options.vendor === undefined || e.vendor_id === options.vendor) &&
        (webhookId === undefined || e.webhook_id === webhookId);
      const print = (e: FeedEntry) =>
        options.json
          ? out(JSON.stringify(e))
          : out(
              [
                e.at,
                e.outcome.padEnd(9),
                e.status_code === null ? '---' : String(e.status_code),
                `${e.duration_ms}ms`.padStart(7),
                `attempt ${e.attempt}`,
                e.decision === 'retry'
                  ? 'retrying'
                  : e.decision === 'delivered'
                    ? 'done'
                    : e.decision === 'dead'
                      ? 'dead letter'
                      : 'webhook disabled',
                e.vendor_id,
                e.webhook_id,
                e.delivery_id,
              ].join('  '),
            );
      await ctx.withStores(async (stores, redisUrl) => {
        const stop = new AbortController();
        void ctx.interrupted().then(() => stop.abort());
        // Redis restarting under a tail that runs for hours is expected: a line when it goes, one when it is back.
        const notices = outageNotices(redisUrl);
        notices.watch(stores.redis, 'app');
        await stores.attemptFeed.listen((entries) => entries.filter(wanted).forEach(print), stop.signal, {
          onListening: () => say('watching delivery attempts (Ctrl-C to stop)'),
          watch: (connection) => notices.watch(connection, 'feed'),
        });
      });
    });
}

/**
 * The vendor portal's links: `portal link` mints one (printed on stdout, shown once), `portal revoke`
 * ends one session or every session of a vendor.
 */
export function addPortalCommands(program: Command, ctx: OperatorCommandContext): void {
  const usageError = (message: string) => ctx.usageError(message);
  const portal = program.command('portal').description('Vendor portal links: issue one, revoke sessions.');
  portal
    .command('link')
    .description('Print a one-time link that opens the vendor portal for one vendor (the link is shown once).')
    .requiredOption('--vendor <vendorId>', 'the vendor whose webhooks the portal shows')
    .option(
      '--permission <permission>',
      `${PORTAL_PERMISSIONS.join(', ')} (read: view; replay: + replays and test events; manage: + changes)`,
      'read',
    )
    .option('--ttl <duration>', 'how long the session lasts, 5m to 7d', '24h')
    .action(async (options: { vendor: string; permission: string; ttl: string }) => {
      checkVendor(options.vendor, usageError);
      if (!(PORTAL_PERMISSIONS as readonly string[]).includes(options.permission))
        throw usageError(`--permission takes ${PORTAL_PERMISSIONS.join(', ')}`);
      const problem = ttlProblem(options.ttl);
      if (problem) throw usageError(`--${problem}`);
      // Where the link points is settled before a session exists that no link would open.
      const baseUrl = ctx.publicBaseUrl();
      await ctx.withStores(async (stores) => {
        // Still issued: the vendor may register its first webhook in the portal (with manage).
        if ((await stores.webhooks.list(options.vendor)).length === 0) {
          say(
            `note: vendor ${options.vendor} has no webhooks (is the id right?); the portal will show none until it registers one`,
          );
        }
        const { session, token } = await stores.portalSessions.issue({
          vendorId: options.vendor,
          permission: options.permission as PortalPermission,
          ttlMs: ttlMsOf(options.ttl),
          issuedBy: 'cli',
        });
        out(portalLink(baseUrl, token));
        ctx.audit(
          {
            event: 'portal.session_issued',
            sessionId: session.id,
            vendorId: session.vendorId,
            permission: session.permission,
            expiresAt: new Date(session.expiresAtMs).toISOString(),
          },
          `portal link for vendor ${session.vendorId} (${session.permission}) issued as ${session.id}; it works once and expires ${new Date(session.expiresAtMs).toISOString()}`,
        );
      });
    });
  portal
    .command('revoke')
    .description(
      'Revoke one portal session (--session) or every session of a vendor (--vendor); they stop working at once.',
    )
    .option('--session <sessionId>', 'a session id (ps_…)')
    .option('--vendor <vendorId>', 'every session of this vendor')
    .action(async (options: { session?: string; vendor?: string }) => {
      if ((options.session === undefined) === (options.vendor === undefined))
        throw usageError('give either --session or --vendor');
      checkVendor(options.vendor, usageError);
      if (options.session !== undefined && !isSessionId(options.session))
        throw usageError('--session must be a session id: ps_ and 24 hex digits');
      await ctx.withStores(async (stores) => {
        if (options.session !== undefined) {
          const revoked = await stores.portalSessions.revoke(options.session);
          if (!revoked) throw usageError(`no live portal session ${options.session}`);
          ctx.audit(
            { event: 'portal.session_revoked', sessionId: revoked.id, vendorId: revoked.vendorId },
            `revoked portal session ${revoked.id}`,
          );
          return out('1');
        }
        const revoked = await stores.portalSessions.revokeVendor(options.vendor!);
        ctx.audit(
          { event: 'portal.sessions_revoked', vendorId: options.vendor, revoked },
          `revoked ${revoked} portal sessions of vendor ${options.vendor}`,
        );
        out(String(revoked));
      });
    });
}
