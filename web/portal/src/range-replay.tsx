import { useState } from 'preact/hooks';
import { call, seg } from './api';
import { Confirm, ErrorText } from './components';
import { STATUS_LABELS } from './format';
import { useAction } from './hooks';
import { browserZone, isoFromLocal } from './local-time';
import { newRangeForm, rangeReplayBody, type RangeForm, type RangeReplayBody } from './range-replay-body';
import { DELIVERY_STATUSES, type DeliveryStatus } from './types';

/** A count the form made: the form as it was, the body it sent (its `until` fixed then), and the answer. */
interface Counted {
  form: RangeForm;
  body: RangeReplayBody;
  count: number;
  /** The count stopped before the range's end: at least `count` events. */
  capped: boolean;
}

const eventsText = (count: number) => (count === 1 ? '1 event' : `${count} events`);

/** A field's hint: the UTC time the page sends for what was typed, or `otherwise`. */
const sentAs = (local: string, otherwise: string) => {
  const iso = isoFromLocal(local);
  return iso === undefined ? otherwise : `Sent as ${iso} (UTC).`;
};

/**
 * "Replay a time range" of a webhook's event feed: the range and which events, counted first (a dry
 * run) and replayed only once the count is confirmed; `onStarted` gets the task to follow. A count
 * speaks only for the form it counted: any change takes it, and its confirmation, away.
 */
export function RangeReplayForm({
  webhookId,
  onStarted,
  onClose,
}: {
  webhookId: string;
  onStarted: (taskId: string) => void;
  onClose: () => void;
}) {
  const [form, setForm] = useState(() => newRangeForm(Date.now()));
  const [counted, setCounted] = useState<Counted>();
  const { busy, error, run } = useAction();
  const path = `/vendors/v1/webhooks/${seg(webhookId)}/replay`;
  const current = counted !== undefined && JSON.stringify(counted.form) === JSON.stringify(form) ? counted : undefined;
  const zone = browserZone();
  const zoneText =
    zone === undefined
      ? 'Times are in your time zone; the API gets them in UTC.'
      : /^(Etc\/)?UTC$/.test(zone)
        ? 'Times are in UTC.'
        : `Times are in your time zone (${zone}); the API gets them in UTC.`;

  const change = (patch: Partial<RangeForm>) => setForm({ ...form, ...patch });
  // In the list's order, so a status unchecked and checked again leaves the form as it was.
  const toggle = (status: DeliveryStatus, checked: boolean) =>
    change({ statuses: DELIVERY_STATUSES.filter((s) => (s === status ? checked : form.statuses.includes(s))) });

  const count = (event: Event) => {
    event.preventDefault();
    return run(async () => {
      const body = rangeReplayBody(form, Date.now());
      const answer = await call<{ count: number; capped?: boolean }>('POST', path, {
        body: { ...body, dry_run: true },
      });
      setCounted({ form, body, count: answer.count, capped: answer.capped === true });
    });
  };
  const start = (body: RangeReplayBody) =>
    run(async () => {
      onStarted((await call<{ task_id: string }>('POST', path, { body })).task_id);
    });

  return (
    <form class="form range" aria-label="Replay a time range" onSubmit={(e) => void count(e)}>
      <h2>Replay a time range</h2>
      <p class="hint">
        Sends each event accepted in the range again, as a new delivery with its original event id (a receiver that
        deduplicates skips those it has). {zoneText}
      </p>
      <div class="range-times">
        <div>
          <label for="range-since">From</label>
          <input
            id="range-since"
            type="datetime-local"
            required
            value={form.since}
            aria-describedby="range-since-sent"
            onInput={(e) => change({ since: e.currentTarget.value })}
          />
          <p class="hint" id="range-since-sent">
            {sentAs(form.since, 'Choose a date and time.')}
          </p>
        </div>
        <div>
          <label for="range-until">To (empty: now)</label>
          <input
            id="range-until"
            type="datetime-local"
            value={form.until}
            aria-describedby="range-until-sent"
            onInput={(e) => change({ until: e.currentTarget.value })}
          />
          <p class="hint" id="range-until-sent">
            {sentAs(form.until, 'Empty: the time you count.')}
          </p>
        </div>
      </div>
      <fieldset>
        <legend>Events whose delivery is</legend>
        <div class="checks">
          {DELIVERY_STATUSES.map((status) => (
            <label key={status} class="check">
              <input
                type="checkbox"
                checked={form.statuses.includes(status)}
                onChange={(e) => toggle(status, e.currentTarget.checked)}
              />{' '}
              {STATUS_LABELS[status].text}
            </label>
          ))}
        </div>
        <p class="hint">All checked: every event in the range, whatever became of it.</p>
      </fieldset>
      <label for="range-rate">Replays per second at most (empty: no pace)</label>
      <input
        id="range-rate"
        type="number"
        min="1"
        max="10000"
        step="1"
        inputMode="numeric"
        value={form.rate}
        onInput={(e) => change({ rate: e.currentTarget.value })}
      />
      <p class="hint">The webhook’s own rate limit applies to sending them too.</p>
      <ErrorText error={error} />
      <p class="count" role="status">
        {current !== undefined &&
          (current.count === 0
            ? 'No events in this range: nothing would be sent again.'
            : current.capped
              ? `At least ${eventsText(current.count)} would be sent again (the count stops there; the replay sends every event of the range).`
              : `${eventsText(current.count)} would be sent again.`)}
      </p>
      {current !== undefined && current.count > 0 ? (
        <Confirm
          question={`From ${current.body.since} to ${current.body.until} (UTC), each as a new delivery; the progress shows here.`}
          label="Confirm the replay"
          action={
            current.capped ? `Replay at least ${eventsText(current.count)}` : `Replay ${eventsText(current.count)}`
          }
          busy={busy}
          onConfirm={() => void start(current.body)}
          onCancel={() => setCounted(undefined)}
        />
      ) : (
        <div class="actions">
          <button type="submit" class="primary" disabled={busy}>
            Count events
          </button>
          <button type="button" onClick={onClose}>
            Close
          </button>
        </div>
      )}
    </form>
  );
}
