import { useState } from 'preact/hooks';
import { ApiError, call, seg } from '../api';
import { Badge, ErrorText, Loading } from '../components';
import { CIRCUIT_LABELS, DISABLED_SHORT, DISABLED_TEXT, eventTypeName, formatTime } from '../format';
import { useAction, useResource } from '../hooks';
import { ReplayProgress } from '../replay';
import { href } from '../router';
import { can } from '../session';
import type { Session, Webhook, WebhookStats } from '../types';

/** Webhooks whose circuit is not closed: deliveries to them are being held back. */
async function heldBack(webhooks: Webhook[]): Promise<WebhookStats[]> {
  const stats = await Promise.all(
    webhooks
      .filter((w) => w.enabled)
      .map((w) =>
        call<WebhookStats>('GET', `/vendors/v1/webhooks/${seg(w.webhook_id)}/stats`).catch((error: unknown) => {
          // An engine without per-webhook stats answers 404: no circuit notices then.
          if (error instanceof ApiError && error.status === 404) return undefined;
          throw error;
        }),
      ),
  );
  return stats.filter((s): s is WebhookStats => s !== undefined && s.circuit !== 'closed');
}

export function NoticesPage({ session }: { session: Session }) {
  const notices = useResource('notices', async () => {
    const { webhooks } = await call<{ webhooks: Webhook[] }>('GET', '/vendors/v1/webhooks');
    return { webhooks, circuits: await heldBack(webhooks) };
  });
  const disabled = notices.data?.webhooks.filter((w) => !w.enabled) ?? [];
  const circuits = notices.data?.circuits ?? [];
  const byId = new Map(notices.data?.webhooks.map((w) => [w.webhook_id, w]));

  return (
    <section aria-labelledby="notices-title">
      <div class="page-head">
        <h1 id="notices-title">Notices</h1>
        <button type="button" onClick={notices.reload}>
          Refresh
        </button>
      </div>
      <ErrorText error={notices.error} />
      {notices.data === undefined ? (
        notices.loading && <Loading what="notices" />
      ) : disabled.length === 0 && circuits.length === 0 ? (
        <p class="empty">
          <span aria-hidden="true">✓</span> Nothing needs your attention: every webhook is enabled and its deliveries
          flow.
        </p>
      ) : (
        <ul class="cards">
          {disabled.map((webhook) => (
            <li key={webhook.webhook_id}>
              <DisabledNotice webhook={webhook} session={session} />
            </li>
          ))}
          {circuits.map((stats) => {
            const webhook = byId.get(stats.webhook_id);
            return (
              webhook && (
                <li key={stats.webhook_id}>
                  <article class="card notice-card">
                    <h2>{eventTypeName(webhook.event_type)}: deliveries held back</h2>
                    <Badge label={CIRCUIT_LABELS[stats.circuit]} />
                    <p>
                      Recent deliveries to <code class="wrap">{webhook.callback_url}</code> failed, so new ones wait
                      instead of piling onto your receiver. A probe is sent now and then; when it succeeds, deliveries
                      flow again by themselves.
                    </p>
                    <a class="button" href={href.deliveries(webhook.webhook_id)}>
                      See the failed attempts
                    </a>
                  </article>
                </li>
              )
            );
          })}
        </ul>
      )}
    </section>
  );
}

/** A disabled webhook; once re-enabled it stays listed (with the replay's progress) until the page is refreshed. */
function DisabledNotice({ webhook, session }: { webhook: Webhook; session: Session }) {
  const { busy, error, run } = useAction();
  const [taskId, setTaskId] = useState<string>();
  const reason = webhook.disabled_reason ?? 'paused';
  const path = `/vendors/v1/webhooks/${seg(webhook.webhook_id)}`;

  // Two calls: enabled first, so the replays are delivered rather than held for a disabled webhook.
  const recover = () =>
    run(async () => {
      await call('PATCH', path, { body: { enabled: true } });
      setTaskId((await call<{ task_id: string }>('POST', `${path}/dead-letters/replay`)).task_id);
    });

  return (
    <article class="card notice-card" aria-labelledby={`notice-${webhook.webhook_id}`}>
      <h2 id={`notice-${webhook.webhook_id}`}>{eventTypeName(webhook.event_type)}</h2>
      {taskId ? (
        <Badge label={{ icon: '●', text: 'Enabled again', tone: 'ok' }} />
      ) : (
        <Badge label={{ icon: '‖', text: DISABLED_SHORT[reason], tone: 'bad' }} />
      )}
      <p>{DISABLED_TEXT[reason]}</p>
      <p class="muted">
        Callback URL <code class="wrap">{webhook.callback_url}</code>, since {formatTime(webhook.updated_at)}. Events
        that arrived meanwhile are dead letters: replay them once your receiver answers again.
      </p>
      <ErrorText error={error} />
      {taskId ? (
        <ReplayProgress taskId={taskId} mayCancel={can(session.permission, 'replay')} />
      ) : can(session.permission, 'manage') ? (
        <div class="actions">
          <button type="button" class="primary" disabled={busy} onClick={() => void recover()}>
            Re-enable and replay dead letters
          </button>
          <a class="button" href={href.deliveries(webhook.webhook_id)}>
            Delivery log
          </a>
        </div>
      ) : (
        <p class="muted">Re-enabling needs a portal link with the manage permission: ask whoever gave you this link.</p>
      )}
    </article>
  );
}
