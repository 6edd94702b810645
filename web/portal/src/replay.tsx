import { useState } from 'preact/hooks';
import { ApiError, call, seg } from './api';
import { Badge, Confirm, ErrorText } from './components';
import { formatMs, outcomeLabel, replayEndLabel, STATUS_LABELS } from './format';
import { useAction, useWatch } from './hooks';
import { href } from './router';
import type { Attempt, Delivery, Task } from './types';

const ENDED = new Set(['delivered', 'dead', 'dropped', 'replayed']);

/** One delivery with its attempts, or undefined where the log holds no record of it (one that expired). */
export async function deliveryOf(
  webhookId: string,
  deliveryId: string,
): Promise<{ delivery: Delivery; attempts: Attempt[] } | undefined> {
  try {
    return await call('GET', `/vendors/v1/webhooks/${seg(webhookId)}/deliveries/${seg(deliveryId)}`);
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return undefined;
    throw error;
  }
}

/**
 * Follows a delivery just queued (a test event or a replay) until it has an outcome: delivered,
 * or failed for good; a failed attempt that will be retried is shown as it happens.
 */
export function DeliveryWatch({
  webhookId,
  deliveryId,
  what,
  onEnded,
}: {
  webhookId: string;
  deliveryId: string;
  what: string;
  onEnded?: () => void;
}) {
  const watch = useWatch(
    deliveryId,
    () => deliveryOf(webhookId, deliveryId),
    (found) => {
      const ended = ENDED.has(found.delivery.status);
      if (ended) onEnded?.();
      return ended;
    },
  );
  const found = watch.value;
  const last = found?.attempts.at(-1);
  return (
    <div class="watch" role="status" aria-live="polite">
      <strong>{what}:</strong>{' '}
      {found === undefined ? (
        watch.done ? (
          'not recorded yet; check the log in a moment.'
        ) : (
          'queued…'
        )
      ) : (
        <>
          <Badge label={STATUS_LABELS[found.delivery.status]} />
          {last && (
            <>
              {' '}
              <Badge label={outcomeLabel(last.outcome, last.status_code)} /> in {formatMs(last.duration_ms)}
            </>
          )}{' '}
          <a href={href.deliveries(webhookId, deliveryId)}>Open it</a>
        </>
      )}
      <ErrorText error={watch.error} />
    </div>
  );
}

const TASK_ENDED = new Set(['success', 'failed']);

/** Where cancelling a bulk replay stands: not asked, being confirmed, or sent (the run is stopping). */
type Cancelling = 'no' | 'asking' | 'sent';

/** What a bulk replay sends again: a webhook's dead letters, or the events of a time range of its feed. */
type ReplayOf = 'dead letters' | 'events';

/** The words of a bulk replay's progress that name what it replays. */
const REPLAY_WORDS: Record<ReplayOf, { running: string; none: string; stop: string }> = {
  'dead letters': {
    running: 'Replaying dead letters…',
    none: 'There were no dead letters to replay.',
    stop: 'Stop this replay? Replays already queued will still be delivered; dead letters not reached stay dead letters.',
  },
  events: {
    running: 'Replaying events…',
    none: 'There were no events to replay.',
    stop: 'Stop this replay? Replays already queued will still be delivered; events not reached are not sent again.',
  },
};

/**
 * A bulk replay's live progress, read from its task: a replay of dead letters or of a time range
 * (`of`), whose tasks report the same progress. With `mayCancel` (sessions that may replay), a
 * running replay can be cancelled: it stops before its next page, and the polling goes on until
 * the replays it queued have outcomes.
 */
export function ReplayProgress({
  taskId,
  of = 'dead letters',
  mayCancel = false,
  onEnded,
}: {
  taskId: string;
  of?: ReplayOf;
  mayCancel?: boolean;
  onEnded?: () => void;
}) {
  const watch = useWatch(
    taskId,
    () => call<Task>('GET', `/rental/v1/tasks/${seg(taskId)}`),
    (task) => {
      const ended = TASK_ENDED.has(task.status);
      if (ended) onEnded?.();
      return ended;
    },
  );
  const [cancelling, setCancelling] = useState<Cancelling>('no');
  const action = useAction();
  const cancel = () =>
    action.run(async () => {
      try {
        await call<Task>('POST', `/vendors/v1/tasks/${seg(taskId)}/cancel`);
      } catch (error) {
        // 409: it ended meanwhile, and the polling shows how.
        if (!(error instanceof ApiError && error.status === 409)) throw error;
      }
      setCancelling('sent');
    });

  const task = watch.value;
  const progress = task?.progress;
  const total = progress?.total ?? 0;
  const delivered = progress?.delivered ?? 0;
  const failed = progress?.failed ?? 0;
  // Replays with an outcome, where the engine counts them; otherwise what the run handled so far.
  const settled = progress?.delivered === undefined ? (progress?.done ?? 0) : delivered + failed;
  const ended = task !== undefined && TASK_ENDED.has(task.status);
  const failReason = task?.status === 'failed' ? task.fail_reason : null;
  // Cancelled by whoever (this page, another, an operator): the engine marks the task's progress.
  const cancelReason = progress?.cancelled === true && failReason !== null ? failReason : undefined;
  const ending = !ended
    ? undefined
    : task.status === 'success'
      ? 'success'
      : cancelReason !== undefined
        ? 'cancelled'
        : 'failed';
  const end = ending === undefined ? undefined : replayEndLabel(ending, failed);
  const words = REPLAY_WORDS[of];
  return (
    <div class="watch" aria-live="polite">
      <label for={`task-${taskId}`}>
        {end ? `${end.icon} ${end.text}` : cancelling === 'sent' ? 'Stopping the replay…' : words.running}
      </label>
      <progress
        id={`task-${taskId}`}
        class={end ? `ended-${end.tone}` : undefined}
        max={Math.max(total, 1)}
        value={ended && total === 0 ? 1 : settled}
      />
      <p class={cancelReason === undefined ? 'muted' : 'muted reason'} role="status">
        {task === undefined
          ? 'Starting…'
          : cancelReason !== undefined
            ? // It counts what was replayed and says what became of the rest: the whole story.
              `${cancelReason}.`
            : task.status === 'pending'
              ? 'Waiting for a worker to start it…'
              : total === 0 && ended
                ? words.none
                : `${settled} of ${total} settled: ${delivered} delivered, ${failed} failed${progress?.pending ? `, ${progress.pending} pending` : ''}.`}
        {ending === 'failed' && failReason ? ` ${failReason}` : ''}
      </p>
      {mayCancel && task !== undefined && !ended && (
        <CancelControl
          question={words.stop}
          state={cancelling}
          busy={action.busy}
          onAsk={() => setCancelling('asking')}
          onConfirm={() => void cancel()}
          onKeep={() => setCancelling('no')}
        />
      )}
      <ErrorText error={action.error} />
      <ErrorText error={watch.error} />
    </div>
  );
}

/** "Cancel replay", asked in the page first; once sent it stays, disabled, until the task ends. */
function CancelControl(props: {
  question: string;
  state: Cancelling;
  busy: boolean;
  onAsk: () => void;
  onConfirm: () => void;
  onKeep: () => void;
}) {
  if (props.state === 'asking')
    return (
      <Confirm
        question={props.question}
        label="Cancel replay"
        action="Confirm"
        back="Keep going"
        busy={props.busy}
        onConfirm={props.onConfirm}
        onCancel={props.onKeep}
      />
    );
  const sent = props.state === 'sent';
  return (
    <div class="actions">
      <button type="button" disabled={sent} onClick={props.onAsk}>
        {sent ? 'Stopping…' : 'Cancel replay'}
      </button>
    </div>
  );
}
