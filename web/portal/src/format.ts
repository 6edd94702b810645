import type { DeliveryStatus, DisabledReason } from './types';

const pad = (n: number) => String(n).padStart(2, '0');

/** `2026-03-02 09:14:05` in the reader's time zone: sortable and the same width everywhere. */
export function formatTime(iso: string | null | undefined): string {
  if (!iso) return '—';
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return iso;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** `3 min ago`, `in 5 h`: how far `iso` is from now, roughly. */
export function fromNow(iso: string, nowMs = Date.now()): string {
  const deltaMs = Date.parse(iso) - nowMs;
  const abs = Math.abs(deltaMs);
  const amount =
    abs < 60_000
      ? `${Math.max(1, Math.round(abs / 1000))} s`
      : abs < 3_600_000
        ? `${Math.round(abs / 60_000)} min`
        : abs < 2 * 86_400_000
          ? `${Math.round(abs / 3_600_000)} h`
          : `${Math.round(abs / 86_400_000)} days`;
  return deltaMs >= 0 ? `in ${amount}` : `${amount} ago`;
}

export function formatMs(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return '—';
  return ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
}

/** A success rate (a fraction from 0 to 1) as a percentage. */
export function formatRate(rate: number | null | undefined): string {
  if (rate === null || rate === undefined) return '—';
  const percent = rate * 100;
  return `${percent === 100 || percent === 0 ? percent.toFixed(0) : percent.toFixed(1)} %`;
}

/** A status as an icon and words, so it reads without colour; `tone` picks the colour class. */
export interface Label {
  icon: string;
  text: string;
  tone: 'ok' | 'bad' | 'warn' | 'muted';
}

export const STATUS_LABELS: Record<DeliveryStatus, Label> = {
  pending: { icon: '…', text: 'Pending', tone: 'muted' },
  retrying: { icon: '↻', text: 'Retrying', tone: 'warn' },
  delivered: { icon: '✓', text: 'Delivered', tone: 'ok' },
  dead: { icon: '✗', text: 'Dead letter', tone: 'bad' },
  dropped: { icon: '–', text: 'Dropped', tone: 'muted' },
  replayed: { icon: '↪', text: 'Replayed', tone: 'muted' },
};

const OUTCOME_TEXT: Record<string, string> = {
  delivered: 'Delivered',
  http_3xx: 'Redirect (3xx, not followed)',
  http_4xx: 'Client error (4xx)',
  http_5xx: 'Server error (5xx)',
  timeout: 'Timed out',
  dns: 'Name not resolved (DNS)',
  connect: 'Connection failed',
  tls: 'TLS error',
  ssrf_blocked: 'Blocked address',
  network: 'Network error',
  auth: 'Not sent: no OAuth2 token',
  circuit_open: 'Held back: circuit open',
  webhook_disabled: 'Webhook disabled',
  paused_expired: 'Not sent: paused past its retry window',
  max_age_expired: 'Not sent: older than the webhook’s max age',
};

/** An attempt's outcome in words, with its status code when there is one. */
export function outcomeLabel(outcome: string | null, statusCode: number | null): Label {
  if (outcome === null) return { icon: '…', text: 'No attempt yet', tone: 'muted' };
  const ok = outcome === 'delivered';
  const base = OUTCOME_TEXT[outcome] ?? outcome;
  return {
    icon: ok ? '✓' : outcome === 'circuit_open' ? '‖' : '✗',
    text: statusCode === null ? base : `${base} · HTTP ${statusCode}`,
    tone: ok ? 'ok' : outcome === 'circuit_open' ? 'warn' : 'bad',
  };
}

/**
 * How a bulk replay ended. A cancelled one stopped where it was asked to, which is no failure: it
 * reads as a warning unless some of the replays it queued failed again.
 */
export function replayEndLabel(ending: 'success' | 'failed' | 'cancelled', failedAgain: number): Label {
  if (ending === 'success') return { icon: '✓', text: 'Replay finished', tone: 'ok' };
  if (ending === 'cancelled') return { icon: '■', text: 'Replay cancelled', tone: failedAgain > 0 ? 'bad' : 'warn' };
  return { icon: '✗', text: 'Replay finished with failures', tone: 'bad' };
}

export const DISABLED_TEXT: Record<DisabledReason, string> = {
  gone: 'The receiver answered 410 Gone, which asks for no more deliveries. Until it is enabled, new deliveries go straight to the dead letters, unsent: replay them once it is.',
  failing:
    'Every delivery failed for the sustained-failure window (5 days by default). Until it is enabled, new deliveries go straight to the dead letters, unsent: replay them once it is.',
  paused:
    'Paused by you (or your platform): deliveries wait, unsent and using none of their attempts, and go out as soon as it is enabled. One still waiting at the end of its retry window (about 3 days by default) is dead-lettered as not sent, and can be replayed.',
};

export const DISABLED_SHORT: Record<DisabledReason, string> = {
  gone: 'Disabled: receiver answered 410 Gone',
  failing: 'Disabled: sustained failures',
  paused: 'Paused',
};

export const CIRCUIT_LABELS: Record<'closed' | 'open' | 'half_open', Label> = {
  closed: { icon: '●', text: 'Closed: deliveries flow', tone: 'ok' },
  open: { icon: '‖', text: 'Open: the endpoint keeps failing, deliveries wait', tone: 'bad' },
  half_open: { icon: '◐', text: 'Half-open: probing the endpoint', tone: 'warn' },
};

/** `EVENT_TYPE_MACHINE_CREATED` → `Machine created`. */
export function eventTypeName(eventType: string): string {
  const words = eventType
    .replace(/^EVENT_TYPE_/, '')
    .toLowerCase()
    .replaceAll('_', ' ');
  return words.charAt(0).toUpperCase() + words.slice(1);
}
