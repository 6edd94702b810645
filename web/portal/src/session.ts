import { ApiError, call, setCsrfToken } from './api';
import type { Permission, Session } from './types';

/**
 * Why the page has no session: a link that does not open, a visit without one (a bookmark), a
 * session that ended, or a page on plain http, where the browser would not keep the session cookie.
 */
export type Closed = 'link_invalid' | 'no_link' | 'expired' | 'signed_out' | 'insecure';

/**
 * Takes a link's one-time token out of the address bar (`#token=…`, a fragment browsers never send
 * to a server), so it is in no history entry, bookmark or screenshot; the page then shows the
 * endpoints. Called once, as the script starts and before anything renders: read any later (the
 * session opens in an effect, after the first paint), a fragment changed meanwhile (a link
 * followed, a script's navigation) would have replaced the token, and the session would not open.
 */
export function takeLinkToken(): string | undefined {
  // Tokens are URL-safe text; anything else in the fragment is not part of one.
  const token = /^#token=([^&]+)/.exec(location.hash)?.[1];
  if (token !== undefined) history.replaceState(null, '', `${location.pathname}${location.search}#/endpoints`);
  return token;
}

/**
 * Opens the page's session: exchanges the link's token (see takeLinkToken) for the session
 * cookie; without one, asks the cookie of an earlier visit (a reload) for its session.
 */
export async function openSession(token: string | undefined): Promise<Session | Closed> {
  // The cookie is Secure (`__Host-`): outside a secure context (https, or localhost) the browser
  // would drop it, and the link's one-time token would be spent for nothing. Checked before it is.
  if (!window.isSecureContext) return 'insecure';
  if (token !== undefined) {
    try {
      return accept(await call<Session>('POST', '/portal/v1/session', { body: { token }, own401: true }));
    } catch (error) {
      if (error instanceof ApiError && error.status === 401) return 'link_invalid';
      throw error;
    }
  }
  try {
    return accept(await call<Session>('GET', '/portal/v1/session', { own401: true }));
  } catch (error) {
    // No link and no live session: a bookmark, or a reload after the session ended. Either way the
    // visitor needs a new link, not the news that something ended.
    if (error instanceof ApiError && error.status === 401) return 'no_link';
    throw error;
  }
}

function accept(session: Session): Session {
  setCsrfToken(session.csrf_token);
  return session;
}

/** Ends the session on the server (its cookie is cleared), then stops every further request of the page. */
export async function signOut(): Promise<void> {
  await call('DELETE', '/portal/v1/session');
  setCsrfToken(undefined);
}

const RANK: Record<Permission, number> = { read: 0, replay: 1, manage: 2 };

/** Whether a session of `permission` may do what `needs` allows. The server checks every call too; this only hides buttons. */
export const can = (permission: Permission, needs: Permission) => RANK[permission] >= RANK[needs];

export const PERMISSION_TEXT: Record<Permission, string> = {
  read: 'view only',
  replay: 'view, replay and send test events',
  manage: 'view, replay, test, and change webhooks and secrets',
};
