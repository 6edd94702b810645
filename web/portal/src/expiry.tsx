import { useEffect, useState } from 'preact/hooks';
import { call } from './api';
import { expiryNotice } from './expiry-notice';
import { formatTime, fromNow } from './format';

/**
 * When the session ends. A session lasts as long as its link said (5 minutes to 7 days) and is not
 * renewed, so the page says in time when it will end: in the header always, and in a warning for its
 * last EXPIRY_WARNING_MS, counting down. The times are the browser's clock against the server's
 * `expires_at`; at the end the page asks the server rather than trusting its own clock, and the
 * server's 401 closes the page the way any ended session does (api.ts).
 */

/** How often the page asks the server, once the warning has run out, whether the session has ended. */
const ENDED_CHECK_MS = 10_000;

/** The time now, refreshed every `everyMs` while the component is shown. */
function useNow(everyMs: number): number {
  const [nowMs, setNowMs] = useState(Date.now);
  useEffect(() => {
    const timer = setInterval(() => setNowMs(Date.now()), everyMs);
    return () => clearInterval(timer);
  }, [everyMs]);
  return nowMs;
}

/** `in 5 h`, refreshed while the page is open; in the warning's minutes, the warning's own words. */
export function ExpiresIn({ expiresAt }: { expiresAt: string }) {
  const nowMs = useNow(1_000);
  const notice = expiryNotice(Date.parse(expiresAt), nowMs);
  return (
    <time dateTime={expiresAt} title={formatTime(expiresAt)}>
      {notice.kind === 'soon' ? `in ${notice.left}` : notice.kind === 'ending' ? 'now' : fromNow(expiresAt, nowMs)}
    </time>
  );
}

/** The warning shown in a session's last minutes. */
export function ExpiryWarning({ expiresAt }: { expiresAt: string }) {
  const notice = expiryNotice(Date.parse(expiresAt), useNow(1_000));
  const ending = notice.kind === 'ending';
  useEffect(() => {
    if (!ending) return;
    // A 401 ends access for the whole page; any other answer means the server's clock says "not yet".
    const check = () => void call('GET', '/portal/v1/session').catch(() => undefined);
    check();
    const timer = setInterval(check, ENDED_CHECK_MS);
    return () => clearInterval(timer);
  }, [ending]);
  if (notice.kind === 'none') return null;
  return (
    <p class="notice expiry" role="status">
      <span aria-hidden="true">⚠</span>{' '}
      {notice.kind === 'soon' ? `Your portal session ends in ${notice.left}.` : 'Your portal session is ending now.'} To
      keep working after that, ask for a new link.
    </p>
  );
}
