import { ApiError, call, seg } from './api';
import { Badge, ErrorText } from './components';
import { formatMs, outcomeLabel, STATUS_LABELS } from './format';
import { useWatch } from './hooks';
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

/** A bulk replay's live progress, read from its task. */
export function ReplayProgress({ taskId, onEnded }: { taskId: string; onEnded?: () => void }) {
  const watch = useWatch(
    taskId,
    () => call<Task>('GET', `/rental/v1/tasks/${seg(taskId)}`),
    (task) => {
      const ended = TASK_ENDED.has(task.status);
      if (ended) onEnded?.();
      return ended;
    },
  );
  const task = watch.value;
  const progress = task?.progress;
  const total = progress?.total ?? 0;
  const delivered = progress?.delivered ?? 0;
  const failed = progress?.failed ?? 0;
  // Replays with an outcome, where the engine counts them; otherwise the dead letters handled so far.
  const settled = progress?.delivered === undefined ? (progress?.done ?? 0) : delivered + failed;
  const ended = task !== undefined && TASK_ENDED.has(task.status);
  return (
    <div class="watch" aria-live="polite">
      <label for={`task-${taskId}`}>
        {ended
          ? task.status === 'success'
            ? '✓ Replay finished'
            : '✗ Replay finished with failures'
          : 'Replaying dead letters…'}
      </label>
      <progress
        id={`task-${taskId}`}
        class={ended ? (task.status === 'success' ? 'ended-ok' : 'ended-bad') : undefined}
        max={Math.max(total, 1)}
        value={ended && total === 0 ? 1 : settled}
      />
      <p class="muted" role="status">
        {task === undefined
          ? 'Starting…'
          : total === 0 && ended
            ? 'There were no dead letters to replay.'
            : `${settled} of ${total} settled: ${delivered} delivered, ${failed} failed${progress?.pending ? `, ${progress.pending} pending` : ''}.`}
        {task?.status === 'failed' && task.fail_reason ? ` ${task.fail_reason}` : ''}
      </p>
      <ErrorText error={watch.error} />
    </div>
  );
}
