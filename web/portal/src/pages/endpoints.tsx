import { useEffect, useState } from 'preact/hooks';
import { ApiError, call, seg } from '../api';
import { Badge, Confirm, CopyButton, ErrorText, Loading, SecretValue } from '../components';
import {
  CIRCUIT_LABELS,
  DISABLED_SHORT,
  DISABLED_TEXT,
  eventTypeName,
  formatMs,
  formatRate,
  formatTime,
  fromNow,
  outcomeLabel,
} from '../format';
import { useAction, useEvery, useResource } from '../hooks';
import { fieldId, ReceiverAuthFacts, ReceiverAuthSection } from '../receiver-auth';
import { hasReceiverAuth, originMoved, receiverChanges, receiverForm } from '../receiver-auth-changes';
import { retentionChange } from '../retention';
import { includeFieldsChange, retryChange, retryText, scheduleText } from '../retry-policy';
import { href } from '../router';
import { can } from '../session';
import {
  EVENT_TYPES,
  type EventType,
  type FilterExplanation,
  type Priority,
  type PublicKey,
  type Session,
  type Webhook,
  type WebhookStats,
} from '../types';

/** How often the health figures refresh while the page is open. */
const STATS_REFRESH_MS = 30_000;

/** A webhook's stats, or undefined where the engine has none for it (an engine without the stats route answers 404). */
async function statsOf(webhookId: string): Promise<WebhookStats | undefined> {
  try {
    return await call<WebhookStats>('GET', `/vendors/v1/webhooks/${seg(webhookId)}/stats`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return undefined;
    throw error;
  }
}

export function EndpointsPage({ session }: { session: Session }) {
  const webhooks = useResource('webhooks', () => call<{ webhooks: Webhook[] }>('GET', '/vendors/v1/webhooks'));
  const [creating, setCreating] = useState(false);
  const [flash, setFlash] = useState('');
  const manage = can(session.permission, 'manage');
  const list = webhooks.data?.webhooks ?? [];
  const disabled = list.filter((w) => !w.enabled).length;
  const [generated, setGenerated] = useState<string>();
  const changed = (message: string) => {
    setFlash(message);
    webhooks.reload();
  };

  return (
    <section aria-labelledby="endpoints-title">
      <div class="page-head">
        <h1 id="endpoints-title">Endpoints</h1>
        <div class="actions">
          <button type="button" onClick={webhooks.reload}>
            Refresh
          </button>
          {manage && !creating && list.length < EVENT_TYPES.length && (
            <button type="button" class="primary" onClick={() => setCreating(true)}>
              Add a webhook
            </button>
          )}
        </div>
      </div>
      <p role="status" class="flash">
        {flash}
      </p>
      {disabled > 0 && (
        <p class="notice">
          <span aria-hidden="true">⚠</span> {disabled === 1 ? 'One webhook is' : `${disabled} webhooks are`} disabled.{' '}
          <a href={href.notices}>See notices</a>
        </p>
      )}
      {generated && <NewSecret secret={generated} onStored={() => setGenerated(undefined)} />}
      {creating && (
        <WebhookForm
          taken={list.map((w) => w.event_type)}
          onDone={(message, secret) => {
            setCreating(false);
            setGenerated(secret);
            if (message) changed(message);
          }}
        />
      )}
      <ErrorText error={webhooks.error} />
      {webhooks.data === undefined ? (
        webhooks.loading && <Loading what="webhooks" />
      ) : list.length === 0 ? (
        <p class="empty">No webhooks yet.{manage ? ' Add one to start receiving events.' : ''}</p>
      ) : (
        <ul class="cards">
          {list.map((webhook) => (
            <li key={webhook.webhook_id}>
              <WebhookCard webhook={webhook} session={session} onChanged={changed} />
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

type Mode = 'view' | 'edit' | 'delete' | 'rotate' | 'rotate-key';

/** A labelled whole-number input from 1 to `max`, with its hint; empty means the setting is off. */
function WholeNumberField(props: {
  id: string;
  label: string;
  max: number;
  value: string;
  onInput: (value: string) => void;
  hint: string;
}) {
  return (
    <>
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="number"
        min="1"
        max={String(props.max)}
        step="1"
        inputMode="numeric"
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
      />
      <p class="hint">{props.hint}</p>
    </>
  );
}

/** A number field's value: null when empty (the API then removes the setting); the API checks the range. */
function numberOrNull(text: string): number | null {
  const trimmed = text.trim();
  return trimmed === '' ? null : Number(trimmed);
}

/** A filter field's value: null when empty; a clear error when it is not JSON (the API checks the rest). */
function filterOrNull(text: string): unknown {
  if (text.trim() === '') return null;
  try {
    return JSON.parse(text) as unknown;
  } catch {
    throw new Error('The payload filter is not valid JSON.');
  }
}

/** A filter dry run: the filter text it tried, and the API's verdict or the error. */
interface DryRun {
  forText: string;
  answer?: { matched: boolean; explanation: FilterExplanation | null };
  error?: Error;
}

/** What a filter dry run answered, node by node. */
function FilterVerdict({ matched, explanation }: { matched: boolean; explanation: FilterExplanation | null }) {
  const lines: { depth: number; node: FilterExplanation }[] = [];
  const walk = (node: FilterExplanation, depth: number) => {
    lines.push({ depth, node });
    for (const part of node.parts ?? []) walk(part, depth + 1);
  };
  if (explanation) walk(explanation, 0);
  return (
    <div role="status">
      <p>
        <strong>
          {matched ? '✓ Matches: this event would be sent.' : '✗ Does not match: this event would not be sent.'}
        </strong>
      </p>
      <ul class="filter-result">
        {lines.map(({ depth, node }, i) => (
          <li key={i} class={`depth-${Math.min(depth, 5)}`}>
            {node.matched ? '✓' : '✗'} <code>{node.test}</code>
            {node.found_kind === 'value' && ` (found ${JSON.stringify(node.found)})`}
            {node.found_kind !== undefined &&
              node.found_kind !== 'value' &&
              ` (found ${node.found_kind === 'missing' ? 'nothing' : `a ${node.found_kind}`})`}
          </li>
        ))}
      </ul>
    </div>
  );
}

/** What signs the webhook's deliveries, in words: its key pair, its secret, both, or nothing. */
function signedText(webhook: Webhook): string {
  if (webhook.signature === 'ed25519')
    return webhook.has_secret ? 'signed with Ed25519 (v1a) and the secret (HMAC)' : 'signed with Ed25519 (v1a) only';
  return webhook.has_secret ? 'signed with the secret (HMAC)' : 'unsigned: no secret';
}

/**
 * A labelled one-line text field for a setting written as code (durations, paths): no autocomplete
 * or spell check, its hint (a paragraph of the caller's, by id) read with it.
 */
function CodeField(props: {
  label: string;
  id: string;
  placeholder: string;
  value: string;
  hint: string;
  onInput: (value: string) => void;
}) {
  return (
    <>
      <label for={props.id}>{props.label}</label>
      <input
        id={props.id}
        type="text"
        autoComplete="off"
        spellcheck={false}
        placeholder={props.placeholder}
        value={props.value}
        aria-describedby={props.hint}
        onInput={(e) => props.onInput(e.currentTarget.value)}
      />
    </>
  );
}

/** The webhook's flow-control settings in words. */
function controlsText(webhook: Webhook): string {
  const parts = [
    webhook.rate_limit_per_second === null
      ? 'No rate limit'
      : `At most ${webhook.rate_limit_per_second} requests a second`,
    webhook.ordering === 'fifo'
      ? webhook.ordering_key === null
        ? 'one at a time, in order (FIFO)'
        : `one at a time per ${webhook.ordering_key}, in order (FIFO by key)`
      : webhook.max_concurrency === null
        ? 'concurrent'
        : `up to ${webhook.max_concurrency} at once per worker`,
    signedText(webhook),
    ...(webhook.priority === 'high' ? ['high priority'] : []),
  ];
  return parts.join('; ');
}

/** A secret Hookline generated, shown this once (it stays readable in the card with the manage permission). */
function NewSecret({
  secret,
  previousUntil,
  onStored,
}: {
  secret: string;
  previousUntil?: string | null;
  onStored: () => void;
}) {
  return (
    <div class="reveal-once" role="status">
      <p>
        <strong>New secret — shown only this once.</strong> Store it with your receiver now.
        {previousUntil && ` The previous secret keeps signing until ${formatTime(previousUntil)}.`}
      </p>
      <p>
        <code class="wrap secret-new">{secret}</code>
      </p>
      <div class="actions">
        <CopyButton text={secret} what="secret" />
        <button type="button" onClick={onStored}>
          I have stored it
        </button>
      </div>
    </div>
  );
}

/** The public keys a receiver verifies v1a signatures with (anyone may see them: they cannot sign). */
function SigningKeys({ webhook }: { webhook: Webhook }) {
  const keys = useResource(`keys:${webhook.webhook_id}:${webhook.updated_at}`, () =>
    call<{ keys: PublicKey[] }>('GET', `/vendors/v1/webhooks/${seg(webhook.webhook_id)}/public-keys`),
  );
  const status = keys.error ? (
    <ErrorText error={keys.error} />
  ) : keys.data === undefined ? (
    <Loading what="public keys" />
  ) : undefined;
  if (status)
    return (
      <div>
        <dt>Public key</dt>
        <dd>{status}</dd>
      </div>
    );
  return (
    <>
      {keys.data!.keys.map((key) => (
        <div key={key.kid}>
          <dt>{key.expires_at === null ? 'Public key' : 'Previous public key'}</dt>
          <dd>
            <code class="wrap">{key.public_key}</code> <CopyButton text={key.public_key} what="public key" />
            <p class="hint">
              Key id {key.kid}
              {key.expires_at !== null && `; signs until ${formatTime(key.expires_at)}`}
            </p>
          </dd>
        </div>
      ))}
    </>
  );
}

function formatPerSecond(rate: number): string {
  return `${rate < 10 ? rate.toFixed(1) : Math.round(rate)}/s`;
}

function WebhookCard({
  webhook,
  session,
  onChanged,
}: {
  webhook: Webhook;
  session: Session;
  onChanged: (message: string) => void;
}) {
  const stats = useResource(`stats:${webhook.webhook_id}:${webhook.updated_at}`, () => statsOf(webhook.webhook_id));
  useEvery(STATS_REFRESH_MS, stats.reload);
  const [mode, setMode] = useState<Mode>('view');
  const { busy, error, run } = useAction();
  const [newSecret, setNewSecret] = useState<{ secret: string; previousUntil: string | null }>();
  const manage = can(session.permission, 'manage');
  const name = eventTypeName(webhook.event_type);
  const path = `/vendors/v1/webhooks/${seg(webhook.webhook_id)}`;

  const remove = () =>
    run(async () => {
      await call('DELETE', path);
      onChanged(`Deleted the ${name} webhook.`);
    });
  const setEnabled = (enabled: boolean) =>
    run(async () => {
      await call('PATCH', path, { body: { enabled } });
      onChanged(
        !enabled
          ? `Paused the ${name} webhook: its deliveries wait, unsent, until you enable it.`
          : webhook.disabled_reason === 'paused'
            ? `Enabled the ${name} webhook: the deliveries held while it was paused go out now.`
            : `Enabled the ${name} webhook.`,
      );
    });
  const rotateKey = () =>
    run(async () => {
      await call('POST', `${path}/rotate-signing-key`);
      setMode('view');
      onChanged(`Rotated the ${name} webhook's signing key; the previous key signs beside it for a day.`);
    });
  const rotate = () =>
    run(async () => {
      const rotated = await call<{ secret: string; previous_secret_expires_at: string | null }>(
        'POST',
        `${path}/rotate-secret`,
      );
      setNewSecret({ secret: rotated.secret, previousUntil: rotated.previous_secret_expires_at });
      setMode('view');
    });

  return (
    <article class="card" aria-labelledby={`wh-${webhook.webhook_id}`}>
      <header class="card-head">
        <h2 id={`wh-${webhook.webhook_id}`}>
          {name} <code class="type">{webhook.event_type}</code>
        </h2>
        {webhook.enabled ? (
          <Badge label={{ icon: '●', text: 'Enabled', tone: 'ok' }} />
        ) : (
          <Badge label={{ icon: '‖', text: DISABLED_SHORT[webhook.disabled_reason ?? 'paused'], tone: 'bad' }} />
        )}
      </header>
      <dl class="facts">
        <div>
          <dt>Callback URL</dt>
          <dd>
            <code class="wrap">{webhook.callback_url}</code>
          </dd>
        </div>
        <div>
          <dt>Delivery controls</dt>
          <dd>{controlsText(webhook)}</dd>
        </div>
        {webhook.filter !== null && (
          <div>
            <dt>Filter</dt>
            <dd>
              <code class="wrap">{JSON.stringify(webhook.filter)}</code>
            </dd>
          </div>
        )}
        <div>
          <dt>Retention</dt>
          <dd>{webhook.retention ?? 'Installation default'}</dd>
        </div>
        <div>
          <dt>Retries</dt>
          <dd>{retryText(webhook)}</dd>
        </div>
        {(webhook.include_fields ?? null) !== null && (
          <div>
            <dt>Fields sent</dt>
            <dd>
              <code class="wrap">{webhook.include_fields!.join(', ')}</code> and the identifiers
            </dd>
          </div>
        )}
        {webhook.propagate_trace === true && (
          <div>
            <dt>Trace propagation</dt>
            <dd>On: each request carries a traceparent header</dd>
          </div>
        )}
        <ReceiverAuthFacts webhook={webhook} />
        {webhook.signature === 'ed25519' && <SigningKeys webhook={webhook} />}
        {webhook.signature === 'hmac' && !webhook.has_secret && (
          <div>
            <dt>Signature</dt>
            <dd>
              None: this webhook was registered without a secret, so its deliveries carry no signature. Rotate secret
              generates one.
            </dd>
          </div>
        )}
        {!webhook.enabled && (
          <div>
            <dt>Why disabled</dt>
            <dd>{DISABLED_TEXT[webhook.disabled_reason ?? 'paused']}</dd>
          </div>
        )}
        {webhook.secret !== undefined && (
          <div>
            <dt>Secret</dt>
            <dd>
              <SecretValue secret={webhook.secret} />
              {webhook.previous_secret_expires_at && (
                <span class="muted">
                  {' '}
                  The previous secret signs too until {formatTime(webhook.previous_secret_expires_at)}.
                </span>
              )}
            </dd>
          </div>
        )}
      </dl>
      <Health stats={stats.data} loading={stats.loading} error={stats.error} enabled={webhook.enabled} />
      {newSecret && (
        <NewSecret
          secret={newSecret.secret}
          previousUntil={newSecret.previousUntil}
          onStored={() => setNewSecret(undefined)}
        />
      )}
      <ErrorText error={error} />
      {mode === 'delete' && (
        <Confirm
          question={`Delete the ${name} webhook? Its pending deliveries are dropped and its log goes with it.`}
          action="Delete webhook"
          danger
          busy={busy}
          onConfirm={() => void remove()}
          onCancel={() => setMode('view')}
        />
      )}
      {mode === 'rotate' && (
        <Confirm
          question="Generate a new secret? It is shown once. The current secret keeps signing beside it for an overlap period, so your receiver can switch without losing deliveries."
          action="Rotate secret"
          busy={busy}
          onConfirm={() => void rotate()}
          onCancel={() => setMode('view')}
        />
      )}
      {mode === 'rotate-key' && (
        <Confirm
          question="Generate a new signing key pair? The current key keeps signing beside the new one for a day, so your receiver can fetch the new public key before it needs it."
          action="Rotate signing key"
          busy={busy}
          onConfirm={() => void rotateKey()}
          onCancel={() => setMode('view')}
        />
      )}
      {mode === 'edit' && (
        <WebhookForm
          webhook={webhook}
          taken={[]}
          onDone={(message, secret) => {
            setMode('view');
            if (secret) setNewSecret({ secret, previousUntil: null });
            if (message) onChanged(message);
          }}
        />
      )}
      <div class="actions">
        <a class="button" href={href.deliveries(webhook.webhook_id)}>
          Delivery log
        </a>
        <a class="button" href={href.events(webhook.webhook_id)}>
          Events
        </a>
        {manage && mode === 'view' && (
          <>
            {!webhook.enabled && (
              <button type="button" class="primary" disabled={busy} onClick={() => void setEnabled(true)}>
                Enable
              </button>
            )}
            <button type="button" onClick={() => setMode('edit')}>
              Edit
            </button>
            <button type="button" onClick={() => setMode('rotate')}>
              Rotate secret
            </button>
            {webhook.signature === 'ed25519' && (
              <button type="button" onClick={() => setMode('rotate-key')}>
                Rotate signing key
              </button>
            )}
            {webhook.enabled && (
              <button type="button" disabled={busy} onClick={() => void setEnabled(false)}>
                Pause
              </button>
            )}
            <button type="button" class="danger" onClick={() => setMode('delete')}>
              Delete
            </button>
          </>
        )}
      </div>
    </article>
  );
}

function Health({
  stats,
  loading,
  error,
  enabled,
}: {
  stats: WebhookStats | undefined;
  loading: boolean;
  error: Error | undefined;
  enabled: boolean;
}) {
  if (error) return <ErrorText error={error} />;
  if (stats === undefined)
    return loading ? (
      <Loading what="health" />
    ) : (
      <p class="muted">Health figures are not available for this webhook.</p>
    );
  const last = stats.last_attempt;
  return (
    <div class="health">
      <table>
        <caption>Health</caption>
        <thead>
          <tr>
            <th scope="col">Window</th>
            <th scope="col">Success</th>
            <th scope="col">p50</th>
            <th scope="col">p95</th>
            <th scope="col">Attempts</th>
          </tr>
        </thead>
        <tbody>
          {(['hour', 'day'] as const).map((window) => {
            const w = stats.windows[window];
            return (
              <tr key={window}>
                <th scope="row">Last {window}</th>
                <td>{formatRate(w.success_rate)}</td>
                <td>{formatMs(w.p50_ms)}</td>
                <td>{formatMs(w.p95_ms)}</td>
                <td>{w.attempts}</td>
              </tr>
            );
          })}
        </tbody>
      </table>
      <dl class="facts">
        <div>
          <dt>Last attempt</dt>
          <dd>
            {last === null ? (
              'None yet'
            ) : (
              <>
                <Badge label={outcomeLabel(last.outcome, last.status_code)} /> {formatMs(last.duration_ms)},{' '}
                <time dateTime={last.attempted_at} title={formatTime(last.attempted_at)}>
                  {fromNow(last.attempted_at)}
                </time>
              </>
            )}
          </dd>
        </div>
        {/* A disabled webhook sends nothing, so "deliveries flow" would mislead. */}
        {enabled && (
          <div>
            <dt>Circuit</dt>
            <dd>
              <Badge label={CIRCUIT_LABELS[stats.circuit]} />
            </dd>
          </div>
        )}
        {stats.concurrency && stats.concurrency.limit !== null && (
          <div>
            <dt>Concurrency</dt>
            <dd>
              {stats.concurrency.in_flight} in flight of a limit of {stats.concurrency.limit}
              {stats.concurrency.workers > 1 && ` over ${stats.concurrency.workers} workers`}
            </dd>
          </div>
        )}
        {stats.concurrency?.paused_until && (
          <div>
            <dt>Paused</dt>
            <dd>Your endpoint asked for a pause (Retry-After) until {formatTime(stats.concurrency.paused_until)}</dd>
          </div>
        )}
        {stats.fifo_line && (
          <div>
            <dt>In line</dt>
            <dd>
              {stats.fifo_line.length} waiting
              {stats.fifo_line.oldest_waiting_ms !== null &&
                stats.fifo_line.length > 0 &&
                `, the oldest for ${formatMs(stats.fifo_line.oldest_waiting_ms)}`}
            </dd>
          </div>
        )}
        {stats.rate_limit_per_second !== null && (
          <div>
            <dt>Send rate</dt>
            <dd>
              {formatPerSecond(stats.send_rate_per_second)} over the last minute, of at most{' '}
              {stats.rate_limit_per_second}/s
            </dd>
          </div>
        )}
      </dl>
      <Sparkline minutes={stats.minutes} id={`spark-${stats.webhook_id}`} />
    </div>
  );
}

/** The last hour, a bar per minute (delivered above the line, failed below), drawn with SVG attributes: no inline styles. */
function Sparkline({ minutes, id }: { minutes: WebhookStats['minutes']; id: string }) {
  if (minutes.length === 0) return null;
  const peak = Math.max(1, ...minutes.map((m) => Math.max(m.delivered, m.failed)));
  const delivered = minutes.reduce((sum, m) => sum + m.delivered, 0);
  const failed = minutes.reduce((sum, m) => sum + m.failed, 0);
  const half = 15;
  return (
    <figure class="spark">
      <svg
        viewBox={`0 0 ${minutes.length * 4} ${half * 2 + 1}`}
        preserveAspectRatio="none"
        role="img"
        aria-labelledby={id}
      >
        {minutes.map((m, i) => {
          const up = (m.delivered / peak) * half;
          const down = (m.failed / peak) * half;
          return (
            <g key={m.minute}>
              {up > 0 && <rect class="spark-ok" x={i * 4} y={half - up} width="3" height={up} />}
              {down > 0 && <rect class="spark-bad" x={i * 4} y={half + 1} width="3" height={down} />}
            </g>
          );
        })}
        <rect class="spark-axis" x="0" y={half} width={minutes.length * 4} height="1" />
      </svg>
      <figcaption id={id} class="muted">
        Last {minutes.length} minutes: {delivered} delivered (above the line), {failed} failed (below).
      </figcaption>
    </figure>
  );
}

/**
 * Registers a webhook (no `webhook`) or edits one; `onDone` gets what to announce (and a secret
 * Hookline generated for a new webhook, to show once), or nothing when cancelled.
 */
function WebhookForm({
  webhook,
  taken,
  onDone,
}: {
  webhook?: Webhook;
  taken: EventType[];
  onDone: (message?: string, secret?: string) => void;
}) {
  const free = EVENT_TYPES.filter((t) => !taken.includes(t));
  const [eventType, setEventType] = useState<EventType>(webhook?.event_type ?? free[0] ?? EVENT_TYPES[0]);
  const [url, setUrl] = useState(webhook?.callback_url ?? '');
  const [secret, setSecret] = useState('');
  const [rateLimit, setRateLimit] = useState(webhook?.rate_limit_per_second?.toString() ?? '');
  const [signature, setSignature] = useState<Webhook['signature']>(webhook?.signature ?? 'hmac');
  const [ordering, setOrdering] = useState<Webhook['ordering']>(webhook?.ordering ?? 'none');
  const [orderingKey, setOrderingKey] = useState(webhook?.ordering_key ?? '');
  const [maxConcurrency, setMaxConcurrency] = useState(webhook?.max_concurrency?.toString() ?? '');
  const [filterText, setFilterText] = useState(webhook?.filter ? JSON.stringify(webhook.filter, null, 2) : '');
  const [retention, setRetention] = useState(webhook?.retention ?? '');
  const [retrySchedule, setRetrySchedule] = useState(() => scheduleText(webhook));
  const [maxAge, setMaxAge] = useState(webhook?.retry?.max_age ?? '');
  const [includeFields, setIncludeFields] = useState(webhook?.include_fields?.join(', ') ?? '');
  const [priority, setPriority] = useState<Priority>(webhook?.priority ?? 'normal');
  const [propagateTrace, setPropagateTrace] = useState(webhook?.propagate_trace === true);
  const [dryRun, setDryRun] = useState<DryRun>();
  const [trying, setTrying] = useState(false);
  const [receiver, setReceiver] = useState(() => receiverForm(webhook));
  const [receiverOpen, setReceiverOpen] = useState(() => hasReceiverAuth(webhook));
  // Problems in the receiver section show once a save was tried, then follow the fields as they change.
  const [checkReceiver, setCheckReceiver] = useState(false);
  const [focusRequest, setFocusRequest] = useState(0);
  const { busy, error, run } = useAction();
  const id = webhook?.webhook_id ?? 'new';
  const receiverResult = receiverChanges(webhook, receiver, url);
  const receiverProblems = checkReceiver ? receiverResult.problems : [];
  const firstProblem = receiverProblems[0]?.field;
  // A save held back by a problem in the receiver section takes the focus to its first field (and
  // only a save does: a problem changing while the vendor types leaves the focus where it is).
  useEffect(() => {
    if (focusRequest > 0 && firstProblem !== undefined) document.getElementById(fieldId(id, firstProblem))?.focus();
  }, [focusRequest]);

  const submit = (event: Event) => {
    event.preventDefault();
    if (receiverResult.problems.length > 0) {
      setCheckReceiver(true);
      setReceiverOpen(true);
      setFocusRequest((n) => n + 1);
      return;
    }
    return run(async () => {
      const limit = numberOrNull(rateLimit);
      const ceiling = numberOrNull(maxConcurrency);
      const filter = filterOrNull(filterText);
      const kept = retentionChange(webhook, retention);
      const retry = retryChange(webhook, retrySchedule, maxAge);
      const fields = includeFieldsChange(webhook, includeFields);
      // A key orders FIFO deliveries only: switching to concurrent removes it.
      const key = ordering === 'fifo' && orderingKey.trim() !== '' ? orderingKey.trim() : null;
      if (webhook) {
        const changes: Record<string, unknown> = {};
        if (eventType !== webhook.event_type) changes.event_type = eventType;
        if (url !== webhook.callback_url) changes.callback_url = url;
        if (secret !== '') changes.secret = secret;
        if (limit !== webhook.rate_limit_per_second) changes.rate_limit_per_second = limit;
        if (signature !== webhook.signature) changes.signature = signature;
        if (ordering !== webhook.ordering) changes.ordering = ordering;
        if (key !== webhook.ordering_key) changes.ordering_key = key;
        if (ceiling !== webhook.max_concurrency) changes.max_concurrency = ceiling;
        if (JSON.stringify(filter) !== JSON.stringify(webhook.filter)) changes.filter = filter;
        if (kept !== undefined) changes.retention = kept;
        if (retry !== undefined) changes.retry = retry;
        if (fields !== undefined) changes.include_fields = fields;
        if (priority !== (webhook.priority ?? 'normal')) changes.priority = priority;
        if (propagateTrace !== (webhook.propagate_trace === true)) changes.propagate_trace = propagateTrace;
        Object.assign(changes, receiverResult.body);
        if (Object.keys(changes).length === 0) return onDone();
        const saved = await call<Webhook>('PATCH', `/vendors/v1/webhooks/${seg(webhook.webhook_id)}`, {
          body: changes,
        });
        // A switch to HMAC without a secret generates one.
        const generated = !webhook.has_secret && changes.secret === undefined ? saved.secret : undefined;
        onDone(`Saved the ${eventTypeName(eventType)} webhook.`, generated);
      } else {
        const controls = {
          ...(limit === null ? {} : { rate_limit_per_second: limit }),
          ...(ceiling === null ? {} : { max_concurrency: ceiling }),
          ...(signature === 'hmac' ? {} : { signature }),
          ...(ordering === 'none' ? {} : { ordering }),
          ...(key === null ? {} : { ordering_key: key }),
          ...(filter === null ? {} : { filter }),
          ...(kept === undefined ? {} : { retention: kept }),
          ...(retry === undefined ? {} : { retry }),
          ...(fields === undefined ? {} : { include_fields: fields }),
          ...(priority === 'high' ? { priority } : {}),
          ...(propagateTrace ? { propagate_trace: true } : {}),
          ...receiverResult.body,
        };
        const created = await call<{ webhook_id: string; secret?: string }>('POST', '/vendors/v1/webhooks', {
          body: { event_type: eventType, callback_url: url, ...(secret === '' ? {} : { secret }), ...controls },
        });
        onDone(`Added the ${eventTypeName(eventType)} webhook.`, created.secret);
      }
    });
  };

  const tryFilter = async (recent: boolean) => {
    if (!webhook) return;
    const forText = filterText;
    setTrying(true);
    try {
      const answer = await call<{ matched: boolean; explanation: FilterExplanation | null }>(
        'POST',
        `/vendors/v1/webhooks/${seg(webhook.webhook_id)}/filter-test`,
        { body: { filter: filterOrNull(forText), ...(recent ? { recent: true } : {}) } },
      );
      setDryRun({ forText, answer });
    } catch (e) {
      setDryRun({ forText, error: e as Error });
    } finally {
      setTrying(false);
    }
  };
  // A dry run speaks only for the text it tried: once the filter changes, its verdict or error goes.
  const tried = dryRun?.forText === filterText ? dryRun : undefined;

  return (
    <form class="form" onSubmit={(e) => void submit(e)} aria-label={webhook ? 'Edit webhook' : 'Add a webhook'}>
      <h3>{webhook ? 'Edit webhook' : 'Add a webhook'}</h3>
      <label for={`type-${id}`}>Event type</label>
      <select id={`type-${id}`} value={eventType} onChange={(e) => setEventType(e.currentTarget.value as EventType)}>
        {(webhook ? EVENT_TYPES : free).map((t) => (
          <option key={t} value={t}>
            {t}
          </option>
        ))}
      </select>
      <label for={`url-${id}`}>Callback URL</label>
      <input
        id={`url-${id}`}
        type="url"
        required
        inputMode="url"
        autoComplete="off"
        placeholder="https://example.com/hooks/hookline"
        value={url}
        onInput={(e) => setUrl(e.currentTarget.value)}
      />
      <label for={`secret-${id}`}>
        {webhook ? 'New secret (leave empty to keep the current one)' : 'Secret (optional)'}
      </label>
      <input
        id={`secret-${id}`}
        type="password"
        autoComplete="new-password"
        value={secret}
        onInput={(e) => setSecret(e.currentTarget.value)}
      />
      <p class="hint">
        {webhook
          ? 'A whsec_ secret (base64 after the prefix) works with Standard Webhooks libraries; Rotate secret generates one.'
          : 'Left empty, Hookline generates a whsec_ secret and shows it once (not with Ed25519 alone, whose key pair signs). A whsec_ secret works with Standard Webhooks libraries.'}
      </p>
      <fieldset>
        <legend>Delivery controls</legend>
        <WholeNumberField
          id={`rate-${id}`}
          label="Rate limit: requests per second at most (empty: unlimited)"
          max={10_000}
          value={rateLimit}
          onInput={setRateLimit}
          hint="Never more than this many requests reach you in any one second; deliveries over it wait their turn (not a failure)."
        />
        <WholeNumberField
          id={`conc-${id}`}
          label="Concurrent requests at most, per worker (empty: as many as the endpoint takes)"
          max={1_000}
          value={maxConcurrency}
          onInput={setMaxConcurrency}
          hint="Below this, Hookline finds your endpoint's pace by itself: it halves on 429, 503 and timeouts, and a Retry-After pauses every worker."
        />
        <label for={`order-${id}`}>Order</label>
        <select
          id={`order-${id}`}
          value={ordering}
          onChange={(e) => setOrdering(e.currentTarget.value as Webhook['ordering'])}
        >
          <option value="none">As fast as your endpoint takes them (concurrent)</option>
          <option value="fifo">One at a time, in the order the events happened (FIFO)</option>
        </select>
        <p class="hint">
          FIFO: a delivery that keeps failing holds the ones behind it until it succeeds or is dead-lettered.
        </p>
        {ordering === 'fifo' && (
          <>
            <label for={`order-key-${id}`}>Keep order per (a path into the event; empty: one order for all)</label>
            <input
              id={`order-key-${id}`}
              type="text"
              spellcheck={false}
              autoComplete="off"
              placeholder="data.metadata.machine_id"
              value={orderingKey}
              onInput={(e) => setOrderingKey(e.currentTarget.value)}
            />
            <p class="hint">
              With a path such as data.metadata.machine_id, each machine's deliveries keep their order, different
              machines go out side by side, and a failing one holds back only its own. Values share 64 lines, so a few
              others may wait with it; events without a value there keep one order of their own.
            </p>
          </>
        )}
        <label for={`priority-${id}`}>Priority</label>
        <select
          id={`priority-${id}`}
          value={priority}
          aria-describedby={`priority-hint-${id}`}
          onChange={(e) => setPriority(e.currentTarget.value as Priority)}
        >
          <option value="normal">Normal</option>
          <option value="high">High: ahead of your other webhooks’ deliveries to this host</option>
        </select>
        <p class="hint" id={`priority-hint-${id}`}>
          When your endpoint holds deliveries back (its concurrency, after an outage, at first contact), a high-priority
          webhook’s deliveries go first, so a deployment stopping is not stuck behind a backlog of machine updates.
        </p>
        <label for={`filter-${id}`}>Payload filter (JSON; empty: every event of the type)</label>
        <textarea
          id={`filter-${id}`}
          spellcheck={false}
          value={filterText}
          aria-invalid={tried?.error ? true : undefined}
          aria-describedby={`filter-hint-${id} filter-tried-${id}`}
          onInput={(e) => setFilterText(e.currentTarget.value)}
        />
        <p class="hint" id={`filter-hint-${id}`}>
          For example {'{"path": "data.status", "eq": "unavailable"}'}; eq, ne, in, gt, gte, lt, lte, exists, and, or,
          not. Events it does not match are not sent.
        </p>
        {webhook && (
          <div class="actions">
            <button type="button" class="small" disabled={trying} onClick={() => void tryFilter(false)}>
              Try on a sample event
            </button>
            {webhook.filter !== null && (
              <button type="button" class="small" disabled={trying} onClick={() => void tryFilter(true)}>
                Try on the newest event
              </button>
            )}
          </div>
        )}
        <div class="dry-run" id={`filter-tried-${id}`}>
          <ErrorText error={tried?.error} />
          {tried?.answer && <FilterVerdict matched={tried.answer.matched} explanation={tried.answer.explanation} />}
        </div>
        <label for={`sig-${id}`}>Signature</label>
        <select
          id={`sig-${id}`}
          value={signature}
          onChange={(e) => setSignature(e.currentTarget.value as Webhook['signature'])}
        >
          <option value="hmac">HMAC with the secret (v1)</option>
          <option value="ed25519">Ed25519 key pair too (v1a): verify with a public key</option>
        </select>
        <p class="hint">
          With Ed25519 your receiver needs only the public key shown on this card; see the catalogue for verification
          code.
        </p>
      </fieldset>
      <CodeField
        label="Retention (empty: the installation’s)"
        id={`retention-${id}`}
        placeholder="3d"
        value={retention}
        hint={`retention-hint-${id}`}
        onInput={setRetention}
      />
      <p class="hint" id={`retention-hint-${id}`}>
        How long this webhook’s events, their payloads and delivery records are kept (its event feed and range replays
        reach that far back): whole minutes, hours or days, such as 30m, 24h or 3d; at least 1m, at most the
        installation’s retention (7d unless your platform set another).
      </p>
      <CodeField
        label="Retry delays (empty: the installation’s)"
        id={`retry-schedule-${id}`}
        placeholder="30s, 5m, 1h"
        value={retrySchedule}
        hint={`retry-hint-${id}`}
        onInput={setRetrySchedule}
      />
      <CodeField
        label="Max age (empty: none)"
        id={`max-age-${id}`}
        placeholder="1h"
        value={maxAge}
        hint={`retry-hint-${id}`}
        onInput={setMaxAge}
      />
      <p class="hint" id={`retry-hint-${id}`}>
        After a failed attempt, the next one waits the first delay, then the second, and so on (whole seconds, minutes,
        hours or days, such as 30s, 5m, 1h); after the last, the delivery is a dead letter. A delivery not delivered
        within the max age of its event is not sent: it becomes a dead letter (max_age_expired), replayable. Both stay
        within the installation’s schedule.
      </p>
      <CodeField
        label="Fields sent (empty: every field)"
        id={`include-fields-${id}`}
        placeholder="data.status, data.pricing"
        value={includeFields}
        hint={`include-fields-hint-${id}`}
        onInput={setIncludeFields}
      />
      <p class="hint" id={`include-fields-hint-${id}`}>
        Only these paths of the event’s data are sent (named as in filters; a list is sent whole), with the envelope and
        the identifiers (machine_id, deployment_id, task_id) always. Events accepted from then on are cut; the signature
        covers what is sent.
      </p>
      <label class="check">
        <input
          type="checkbox"
          checked={propagateTrace}
          aria-describedby={`trace-hint-${id}`}
          onChange={(e) => setPropagateTrace(e.currentTarget.checked)}
        />{' '}
        Send a traceparent header (W3C Trace Context)
      </label>
      <p class="hint" id={`trace-hint-${id}`}>
        Each request names its attempt in the event’s trace, so your receiver’s spans join the platform’s trace of the
        event. The delivery log shows each attempt’s trace id either way.
      </p>
      <ReceiverAuthSection
        formId={id}
        webhook={webhook}
        form={receiver}
        onChange={setReceiver}
        problems={receiverProblems}
        originMoved={originMoved(webhook?.callback_url, url)}
        open={receiverOpen}
        onToggle={setReceiverOpen}
      />
      <ErrorText error={error} />
      <div class="actions">
        <button type="submit" class="primary" disabled={busy}>
          {webhook ? 'Save' : 'Add webhook'}
        </button>
        <button type="button" onClick={() => onDone()}>
          Cancel
        </button>
      </div>
    </form>
  );
}
