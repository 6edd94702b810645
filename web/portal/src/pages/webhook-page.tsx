import type { ComponentChildren } from 'preact';
import { call } from '../api';
import { ErrorText, Loading } from '../components';
import { eventTypeName } from '../format';
import { useResource } from '../hooks';
import type { Webhook } from '../types';

/**
 * A page about one of the vendor's webhooks (its delivery log, its events), chosen in the page's
 * head: the one `webhookId` names, else the first. Choosing another goes to `link(id)`, so the
 * address always says which webhook is shown; an id that is not the vendor's says so.
 */
export function WebhookPage({
  name,
  title,
  webhookId,
  link,
  none,
  children,
}: {
  /** Prefixes the ids of the page's heading and picker. */
  name: string;
  title: string;
  webhookId: string | undefined;
  link: (webhookId: string) => string;
  /** What the page says when the vendor has no webhook. */
  none: string;
  children: (webhook: Webhook) => ComponentChildren;
}) {
  const webhooks = useResource('webhooks', () => call<{ webhooks: Webhook[] }>('GET', '/vendors/v1/webhooks'));
  const list = webhooks.data?.webhooks ?? [];
  const webhook = list.find((w) => w.webhook_id === webhookId) ?? (webhookId === undefined ? list[0] : undefined);

  return (
    <section aria-labelledby={`${name}-title`}>
      <div class="page-head">
        <h1 id={`${name}-title`}>{title}</h1>
        {list.length > 0 && (
          <div class="picker">
            <label for={`${name}-webhook`}>Webhook</label>
            <select
              id={`${name}-webhook`}
              value={webhook?.webhook_id ?? ''}
              onChange={(e) => (location.hash = link(e.currentTarget.value))}
            >
              {webhook === undefined && <option value="">Choose a webhook</option>}
              {list.map((w) => (
                <option key={w.webhook_id} value={w.webhook_id}>
                  {eventTypeName(w.event_type)} → {w.callback_url}
                </option>
              ))}
            </select>
          </div>
        )}
      </div>
      <ErrorText error={webhooks.error} />
      {webhooks.data === undefined ? (
        webhooks.loading && <Loading what="webhooks" />
      ) : list.length === 0 ? (
        <p class="empty">{none}</p>
      ) : webhook === undefined ? (
        <p class="empty">This webhook is not one of yours (or was deleted). Choose one above.</p>
      ) : (
        children(webhook)
      )}
    </section>
  );
}
