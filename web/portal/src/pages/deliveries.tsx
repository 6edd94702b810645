import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { call, query, seg } from '../api';
import { Badge, Confirm, ErrorText, Loading } from '../components';
import { eventTypeName, formatMs, formatTime, outcomeLabel, STATUS_LABELS } from '../format';
import { useAction, usePages, useResource } from '../hooks';
import { isoFromLocal } from '../local-time';
import { DeliveryWatch, deliveryOf, ReplayProgress } from '../replay';
import { href } from '../router';
import { can } from '../session';
import {
  DELIVERY_STATUSES,
  EVENT_TYPES,
  type Attempt,
  type Delivery,
  type DeliveryPage,
  type Session,
  type Webhook,
} from '../types';
import { WebhookPage } from './webhook-page';

interface Filters {
  status: string;
  eventType: string;
  /** `datetime-local` values, in the reader's time zone. */
  since: string;
  until: string;
}

const NO_FILTERS: Filters = { status: '', eventType: '', since: '', until: '' };

export function DeliveriesPage({
  session,
  webhookId,
  deliveryId,
}: {
  session: Session;
  webhookId: string | undefined;
  deliveryId: string | undefined;
}) {
  return (
    <WebhookPage
      name="log"
      title="Delivery log"
      webhookId={webhookId}
      link={(id) => href.deliveries(id)}
      none="No webhooks, so nothing was delivered yet."
    >
      {(webhook) => <WebhookLog key={webhook.webhook_id} session={session} webhook={webhook} deliveryId={deliveryId} />}
    </WebhookPage>
  );
}

function WebhookLog({
  session,
  webhook,
  deliveryId,
}: {
  session: Session;
  webhook: Webhook;
  deliveryId: string | undefined;
}) {
  const [filters, setFilters] = useState<Filters>(NO_FILTERS);
  const [draft, setDraft] = useState<Filters>(NO_FILTERS);
  const [version, setVersion] = useState(0);
  const [testId, setTestId] = useState<string>();
  const [taskId, setTaskId] = useState<string>();
  /** While "Replay all" is being confirmed: how many dead letters it would replay. */
  const [replayCount, setReplayCount] = useState<number>();
  const action = useAction();
  const mayReplay = can(session.permission, 'replay');
  const base = `/vendors/v1/webhooks/${seg(webhook.webhook_id)}`;
  const reload = () => setVersion((v) => v + 1);

  const page = (cursor?: string) =>
    call<DeliveryPage>(
      'GET',
      `${base}/deliveries${query({
        limit: '25',
        status: filters.status,
        event_type: filters.eventType,
        since: isoFromLocal(filters.since),
        until: isoFromLocal(filters.until),
        cursor,
      })}`,
    );

  const { items, hasMore, loading, error, more } = usePages(
    async (cursor) => {
      const answer = await page(cursor);
      return { items: answer.deliveries, next: answer.next_cursor };
    },
    [filters, version],
  );

  const sendTest = () =>
    action.run(async () => {
      setTestId((await call<{ delivery_id: string }>('POST', `${base}/test`)).delivery_id);
      reload();
    });
  // Asked first, with the count the replay will take on: it sends every dead letter again at once.
  const askReplayAll = () =>
    action.run(async () => {
      setReplayCount((await call<{ total: number }>('GET', `${base}/dead-letters?limit=1`)).total);
    });
  const replayAll = () =>
    action.run(async () => {
      setTaskId((await call<{ task_id: string }>('POST', `${base}/dead-letters/replay`)).task_id);
      setReplayCount(undefined);
    });

  return (
    <>
      {mayReplay && (
        <div class="toolbar">
          <button type="button" disabled={action.busy} onClick={() => void sendTest()}>
            Send test event
          </button>
          <button type="button" disabled={action.busy} onClick={() => void askReplayAll()}>
            Replay all dead letters
          </button>
        </div>
      )}
      {replayCount === 0 && (
        <p class="empty" role="status">
          This webhook has no dead letters to replay.
        </p>
      )}
      {replayCount !== undefined && replayCount > 0 && (
        <Confirm
          question={`Replay all ${deadLetters(replayCount)} of this webhook? Each is sent again as a new delivery with its original event id, and the progress shows here.`}
          action={`Replay ${deadLetters(replayCount)}`}
          busy={action.busy}
          onConfirm={() => void replayAll()}
          onCancel={() => setReplayCount(undefined)}
        />
      )}
      <ErrorText error={action.error} />
      {testId && (
        <DeliveryWatch
          key={testId}
          webhookId={webhook.webhook_id}
          deliveryId={testId}
          what="Test event"
          onEnded={reload}
        />
      )}
      {taskId && <ReplayProgress key={taskId} taskId={taskId} mayCancel={mayReplay} onEnded={reload} />}
      <form
        class="filters"
        aria-label="Filter deliveries"
        onSubmit={(e) => {
          e.preventDefault();
          setFilters(draft);
        }}
      >
        <div>
          <label for="f-status">Status</label>
          <select
            id="f-status"
            value={draft.status}
            onChange={(e) => setDraft({ ...draft, status: e.currentTarget.value })}
          >
            <option value="">Any</option>
            {DELIVERY_STATUSES.map((s) => (
              <option key={s} value={s}>
                {STATUS_LABELS[s].text}
              </option>
            ))}
          </select>
        </div>
        <div>
          <label for="f-type">Event type</label>
          <select
            id="f-type"
            value={draft.eventType}
            onChange={(e) => setDraft({ ...draft, eventType: e.currentTarget.value })}
          >
            <option value="">Any</option>
            {EVENT_TYPES.map((t) => (
              <option key={t} value={t}>
                {eventTypeName(t)}
              </option>
            ))}
          </select>
        </div>
        <div>
          <label for="f-since">From</label>
          <input
            id="f-since"
            type="datetime-local"
            value={draft.since}
            onInput={(e) => setDraft({ ...draft, since: e.currentTarget.value })}
          />
        </div>
        <div>
          <label for="f-until">To</label>
          <input
            id="f-until"
            type="datetime-local"
            value={draft.until}
            onInput={(e) => setDraft({ ...draft, until: e.currentTarget.value })}
          />
        </div>
        <div class="actions">
          <button type="submit" class="primary">
            Apply
          </button>
          <button
            type="button"
            onClick={() => {
              setDraft(NO_FILTERS);
              setFilters(NO_FILTERS);
            }}
          >
            Clear
          </button>
          <button type="button" onClick={reload}>
            Refresh
          </button>
        </div>
      </form>
      <ErrorText error={error} />
      <div class={deliveryId ? 'log has-detail' : 'log'}>
        {deliveryId && (
          <DeliveryDetail
            key={deliveryId}
            session={session}
            webhookId={webhook.webhook_id}
            deliveryId={deliveryId}
            onChanged={reload}
          />
        )}
        <div class="log-list">
          {items === undefined ? (
            loading && <Loading what="deliveries" />
          ) : items.length === 0 ? (
            <p class="empty">No deliveries{filters === NO_FILTERS ? ' yet' : ' match these filters'}.</p>
          ) : (
            <ul class="deliveries" aria-label="Deliveries, newest first">
              {items.map((d) => (
                <li key={d.delivery_id}>
                  <a
                    class="delivery-row"
                    href={href.deliveries(webhook.webhook_id, d.delivery_id)}
                    aria-current={d.delivery_id === deliveryId ? 'true' : undefined}
                  >
                    <Badge label={STATUS_LABELS[d.status]} />
                    <span class="row-type">{eventTypeName(d.event_type)}</span>
                    <time dateTime={d.created_at}>{formatTime(d.created_at)}</time>
                    <span class="muted">
                      <Subject delivery={d} />
                      {' · '}
                      {/* No break inside "1 attempt" or "HTTP 200" on a narrow row. */}
                      {`${d.attempts}\u00a0${d.attempts === 1 ? 'attempt' : 'attempts'}`}
                      {d.last_status_code !== null && ` · HTTP\u00a0${d.last_status_code}`}
                      {d.last_status_code === null &&
                        d.last_outcome !== null &&
                        d.last_outcome !== 'delivered' &&
                        ` · ${outcomeLabel(d.last_outcome, null).text}`}
                    </span>
                  </a>
                </li>
              ))}
            </ul>
          )}
          {hasMore && (
            <button type="button" class="more" disabled={loading} onClick={() => void more()}>
              Load more
            </button>
          )}
        </div>
      </div>
    </>
  );
}

const deadLetters = (count: number) => (count === 1 ? '1 dead letter' : `${count} dead letters`);

/** The deployment and machine a delivery's event concerns: those its body names, as [term, id]. */
const subjectsOf = (delivery: Delivery): [string, string][] =>
  (
    [
      ['Deployment', delivery.deployment_id],
      ['Machine', delivery.machine_id],
    ] as const
  ).flatMap(([term, id]) => (id === null ? [] : [[term, id]]));

/**
 * What tells a row from the others of its type: the start of its event id (the whole id on hover and
 * in the delivery), and the deployment and machine the event concerns when its body names them.
 */
function Subject({ delivery }: { delivery: Delivery }) {
  return (
    <>
      event <code title={delivery.event_id}>{delivery.event_id.slice(0, 8)}</code>
      {subjectsOf(delivery).map(([term, id]) => (
        <Fragment key={term}>
          {` · ${term.toLowerCase()} `}
          <code class="wrap">{id}</code>
        </Fragment>
      ))}
    </>
  );
}

function DeliveryDetail({
  session,
  webhookId,
  deliveryId,
  onChanged,
}: {
  session: Session;
  webhookId: string;
  deliveryId: string;
  onChanged: () => void;
}) {
  const found = useResource(`delivery:${deliveryId}`, () => deliveryOf(webhookId, deliveryId));
  const [replayId, setReplayId] = useState<string>();
  const { busy, error, run } = useAction();
  const delivery = found.data?.delivery;

  const replay = () =>
    run(async () => {
      const answer = await call<{ delivery_id: string }>(
        'POST',
        `/vendors/v1/webhooks/${seg(webhookId)}/dead-letters/${seg(deliveryId)}/replay`,
      );
      setReplayId(answer.delivery_id);
      found.reload();
      onChanged();
    });

  return (
    <section class="detail" aria-labelledby="detail-title">
      <div class="page-head">
        <h2 id="detail-title">Delivery {deliveryId.slice(0, 8)}</h2>
        <a class="button" href={href.deliveries(webhookId)}>
          Close
        </a>
      </div>
      <ErrorText error={found.error} />
      {found.loading && delivery === undefined && <Loading what="the delivery" />}
      {!found.loading && found.data === undefined && !found.error && (
        <p class="empty">This delivery is not in the log (it may have expired).</p>
      )}
      {delivery && (
        <>
          <dl class="facts">
            <div>
              <dt>Status</dt>
              <dd>
                <Badge label={STATUS_LABELS[delivery.status]} />
              </dd>
            </div>
            <div>
              <dt>Event</dt>
              <dd>
                {eventTypeName(delivery.event_type)} <code class="wrap">{delivery.event_id}</code>
              </dd>
            </div>
            {subjectsOf(delivery).map(([term, id]) => (
              <div key={term}>
                <dt>{term}</dt>
                <dd>
                  <code class="wrap">{id}</code>
                </dd>
              </div>
            ))}
            <div>
              <dt>Accepted</dt>
              <dd>{formatTime(delivery.created_at)}</dd>
            </div>
            {delivery.next_attempt_at && (
              <div>
                <dt>Next attempt</dt>
                <dd>{formatTime(delivery.next_attempt_at)}</dd>
              </div>
            )}
            {delivery.replay_of && (
              <div>
                <dt>Replay of</dt>
                <dd>
                  <a href={href.deliveries(webhookId, delivery.replay_of)}>{delivery.replay_of.slice(0, 8)}</a>
                </dd>
              </div>
            )}
          </dl>
          {delivery.status === 'dead' && can(session.permission, 'replay') && !replayId && (
            <div class="actions">
              <button type="button" class="primary" disabled={busy} onClick={() => void replay()}>
                Replay
              </button>
            </div>
          )}
          <ErrorText error={error} />
          {replayId && (
            <DeliveryWatch
              key={replayId}
              webhookId={webhookId}
              deliveryId={replayId}
              what="Replay"
              onEnded={onChanged}
            />
          )}
          <h3>
            {found.data!.attempts.length} {found.data!.attempts.length === 1 ? 'attempt' : 'attempts'}
          </h3>
          <ol class="attempts" reversed>
            {[...found.data!.attempts].reverse().map((attempt) => (
              <li key={attempt.attempt}>
                <AttemptView attempt={attempt} />
              </li>
            ))}
          </ol>
        </>
      )}
    </section>
  );
}

function AttemptView({ attempt }: { attempt: Attempt }) {
  const headers = attempt.request_headers ? Object.entries(attempt.request_headers) : [];
  return (
    <article class="attempt" aria-label={`Attempt ${attempt.attempt}`}>
      <p class="attempt-head">
        <strong>Attempt {attempt.attempt}</strong> <Badge label={outcomeLabel(attempt.outcome, attempt.status_code)} />{' '}
        <span>{formatMs(attempt.duration_ms)}</span>{' '}
        <time dateTime={attempt.attempted_at}>{formatTime(attempt.attempted_at)}</time>
      </p>
      {attempt.error && <p class="muted">{attempt.error}</p>}
      {attempt.trace_id ? (
        <p class="trace">
          Trace <code>{attempt.trace_id}</code>
          <span class="hint">
            {' '}
            (find it in your tracing tool; with trace propagation on, your receiver got it in traceparent)
          </span>
        </p>
      ) : null}
      {attempt.response_snippet !== null && attempt.response_snippet !== '' ? (
        <>
          <p class="label">Response body (first 4 KiB, shown as text)</p>
          {/* Text, never markup: a receiver's body is hostile input, and Preact escapes every text node. */}
          <pre class="snippet">{attempt.response_snippet}</pre>
        </>
      ) : (
        <p class="muted">No response body.</p>
      )}
      {headers.length > 0 && (
        <details>
          <summary>Request headers sent ({headers.length})</summary>
          <table class="headers">
            <tbody>
              {headers.map(([name, value]) => (
                <tr key={name}>
                  <th scope="row">{name}</th>
                  <td>
                    <code class="wrap">{value}</code>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </details>
      )}
    </article>
  );
}
