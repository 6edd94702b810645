import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';
import type { Label } from './format';

/** A status as icon, words and colour: the words alone carry the meaning. */
export function Badge({ label, title }: { label: Label; title?: string }) {
  return (
    <span class={`badge tone-${label.tone}`} title={title}>
      <span aria-hidden="true">{label.icon}</span> {label.text}
    </span>
  );
}

/** An error from the API, read out when it appears. */
export function ErrorText({ error }: { error: Error | undefined }) {
  if (!error) return null;
  return (
    <p class="error" role="alert">
      <span aria-hidden="true">⚠</span> {error.message}
    </p>
  );
}

export function Loading({ what }: { what: string }) {
  return (
    <p class="muted" role="status">
      Loading {what}…
    </p>
  );
}

/** Copies `text`; where the clipboard is not available (plain http), says to copy it by hand. */
export function CopyButton({ text, what }: { text: string; what: string }) {
  const [state, setState] = useState<'idle' | 'copied' | 'failed'>('idle');
  const copy = () =>
    navigator.clipboard?.writeText(text).then(
      () => setState('copied'),
      () => setState('failed'),
    ) ?? setState('failed');
  return (
    <>
      <button type="button" class="small" onClick={() => void copy()}>
        Copy {what}
      </button>
      <span role="status" class="muted">
        {state === 'copied' ? ' Copied.' : state === 'failed' ? ' Select the text and copy it by hand.' : ''}
      </span>
    </>
  );
}

/** A secret, hidden until revealed. */
export function SecretValue({ secret }: { secret: string }) {
  const [shown, setShown] = useState(false);
  return (
    <span class="secret">
      <code class="wrap">{shown ? secret : '•'.repeat(16)}</code>{' '}
      <button type="button" class="small" aria-pressed={shown} onClick={() => setShown(!shown)}>
        {shown ? 'Hide' : 'Reveal'}
      </button>
    </span>
  );
}

/**
 * A question asked in the page (not a browser dialog), with the action and a way back. The group is
 * named by `label`, else by the action; `back` words the way back (default "Cancel").
 */
export function Confirm(props: {
  question: ComponentChildren;
  action: string;
  label?: string;
  back?: string;
  danger?: boolean;
  busy?: boolean;
  onConfirm: () => void;
  onCancel: () => void;
}) {
  return (
    <div class="confirm" role="group" aria-label={props.label ?? props.action}>
      <p>{props.question}</p>
      <div class="actions">
        <button
          type="button"
          class={props.danger ? 'danger' : 'primary'}
          disabled={props.busy}
          onClick={props.onConfirm}
        >
          {props.action}
        </button>
        <button type="button" onClick={props.onCancel}>
          {props.back ?? 'Cancel'}
        </button>
      </div>
    </div>
  );
}
