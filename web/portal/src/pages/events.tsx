import { Fragment } from 'preact';
import { useState } from 'preact/hooks';
import { call, query, seg } from '../api';
import { Badge, CopyButton, ErrorText, Loading } from '../components';
import { eventTypeName, formatTime, STATUS_LABELS } from '../format';
import { RangeReplayForm } from '../range-replay';
import { ReplayProgress } from '../replay';
import { href } from '../router';
import { can } from '../session';
import type { EventPage, LoggedEvent, Session, Webhook } from '../types';
import { WebhookPage } from './webhook-page';
import { usePages } from '../hooks';

/** Events a page of the feed asks for. */
const PAGE_SIZE = 50;

export function EventsPage({ session, webhookId }: { session: Session; webhookId: string | undefined }) {
  return (
    <WebhookPage
      name="events"
      title="Events"
      webhookId={webhookId}
      link={(id) => href.events(id)}
      none="No webhooks, so no events were matched to one yet."
    >
      {(webhook) => <EventFeed key={webhook.webhook_id} session={session} webhook={webhook} />}
    </WebhookPage>
  );
}

/**
 * A webhook's event feed (GET …/events), oldest first, a page at a time: each event ingest matched
 * to it, with its delivery's status; one opens to the body it was sent. Sessions that may replay
 * replay a time range of it from here.
 */
function EventFeed({ session, webhook }: { session: Session; webhook: Webhook }) {
  const [version, setVersion] = useState(0);
  /** The cursor of the event whose body is shown. */
  const [shown, setShown] = useState<string>();
  const [replaying, setReplaying] = useState(false);
  const [taskId, setTaskId] = useState<string>();
  const mayReplay = can(session.permission, 'replay');
  const reload = () => setVersion((v) => v + 1);

  const page = (after?: string) =>
    call<EventPage>(
      'GET',
      `/vendors/v1/webhooks/${seg(webhook.webhook_id)}/events${query({ limit: String(PAGE_SIZE), after })}`,
    );

  const { items, hasMore, loading, error, more } = usePages(
    async (after) => {
      const answer = await page(after);
      return { items: answer.events, next: answer.next_cursor, hasMore: answer.has_more };
    },
    [version],
  );

  return (
    <>
      <div class="toolbar">
        {mayReplay && (
          <button type="button" disabled={replaying} onClick={() => setReplaying(true)}>
            Replay a time range
          </button>
        )}
        <button type="button" disabled={loading} onClick={reload}>
          Refresh
        </button>
      </div>
      {replaying && (
        <RangeReplayForm
          webhookId={webhook.webhook_id}
          onStarted={(id) => {
            setTaskId(id);
            setReplaying(false);
          }}
          onClose={() => setReplaying(false)}
        />
      )}
      {taskId && <ReplayProgress key={taskId} taskId={taskId} of="events" mayCancel={mayReplay} onEnded={reload} />}
      <ErrorText error={error} />
      {items === undefined ? (
        loading && <Loading what="events" />
      ) : items.length === 0 ? (
        <p class="empty">No events yet: none was matched to this webhook within its retention.</p>
      ) : (
        <table class="events">
          <caption>Oldest first; an event id opens the body it was sent.</caption>
          <thead>
            <tr>
              <th scope="col">Accepted</th>
              <th scope="col">Event</th>
              <th scope="col">Type</th>
              <th scope="col">Status</th>
            </tr>
          </thead>
          <tbody>
            {items.map((e) => {
              const open = e.cursor === shown;
              return (
                <Fragment key={e.cursor}>
                  <tr class={open ? 'shown' : undefined}>
                    <td class="at">
                      <time dateTime={e.accepted_at}>{formatTime(e.accepted_at)}</time>
                    </td>
                    <td class="id">
                      <button
                        type="button"
                        class="event-id"
                        aria-expanded={open}
                        aria-controls={open ? 'event-detail' : undefined}
                        onClick={() => setShown(open ? undefined : e.cursor)}
                      >
                        {e.event_id}
                      </button>
                    </td>
                    <td class="type">{eventTypeName(e.event_type)}</td>
                    <td class="status">
                      <Badge label={STATUS_LABELS[e.status]} />
                    </td>
                  </tr>
                  {open && (
                    <tr class="payload-row">
                      <td colSpan={4}>
                        <EventDetail event={e} webhookId={webhook.webhook_id} onClose={() => setShown(undefined)} />
                      </td>
                    </tr>
                  )}
                </Fragment>
              );
            })}
          </tbody>
        </table>
      )}
      {hasMore && (
        <button type="button" class="more" disabled={loading} onClick={() => void more()}>
          Load more
        </button>
      )}
    </>
  );
}

/**
 * One event of the feed, opened under its row: its delivery, and the body it was sent (as text, like
 * every text the portal renders).
 */
function EventDetail({ event, webhookId, onClose }: { event: LoggedEvent; webhookId: string; onClose: () => void }) {
  const payload = JSON.stringify(event.payload, null, 2);
  return (
    <section class="event-detail" id="event-detail" aria-label={`Event ${event.event_id}`}>
      <dl class="facts">
        <div>
          <dt>First delivery</dt>
          <dd>
            <a href={href.deliveries(webhookId, event.delivery_id)}>{event.delivery_id.slice(0, 8)}</a>
          </dd>
        </div>
      </dl>
      <p class="label">Payload (the body it was sent)</p>
      <pre class="payload">{payload}</pre>
      <div class="actions">
        <CopyButton text={payload} what="payload" />
        <button type="button" class="small" onClick={onClose}>
          Close
        </button>
      </div>
    </section>
  );
}
