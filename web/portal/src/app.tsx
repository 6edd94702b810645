import { useEffect, useState } from 'preact/hooks';
import { endAccess, onAccessLost } from './api';
import { ErrorText } from './components';
import { ExpiresIn, ExpiryWarning } from './expiry';
import { CataloguePage } from './pages/catalogue';
import { DeliveriesPage } from './pages/deliveries';
import { EndpointsPage } from './pages/endpoints';
import { EventsPage } from './pages/events';
import { NoticesPage } from './pages/notices';
import { href, useRoute, type Route } from './router';
import { openSession, PERMISSION_TEXT, signOut, type Closed } from './session';
import { TabBar, type Tab } from './tabs';
import type { Session } from './types';

type State =
  | { kind: 'opening' }
  | { kind: 'open'; session: Session }
  | { kind: 'closed'; why: Closed }
  | { kind: 'failed'; error: Error };

const CLOSED_TEXT: Record<Closed, { title: string; text: string }> = {
  link_invalid: {
    title: 'This link does not open the portal',
    text: 'This portal link is invalid, was already used, has expired or was revoked. Each link opens once. Ask for a new link.',
  },
  no_link: {
    title: 'Open the portal with a link',
    text:
      'The portal opens only from a one-time link, not from a bookmark or a saved address, and each session ends after a while. ' +
      'Ask the platform (or the operator who runs Hookline for it) for a new link to your portal.',
  },
  expired: { title: 'Access ended', text: 'This portal link has expired or was revoked. Ask for a new link.' },
  signed_out: { title: 'Signed out', text: 'You signed out of the portal. Open a new link to come back.' },
  insecure: {
    title: 'The portal needs a secure connection',
    text:
      'This page was opened over plain http, where browsers do not keep the portal’s session. Your link was not used: ' +
      'ask the operator who runs Hookline to serve the portal over https (HOOKLINE_PUBLIC_URL), then open the link there.',
  },
};

/** `linkToken`: the token main.tsx took from the address bar before the first render, if the page was opened by a link. */
export function App({ linkToken }: { linkToken: string | undefined }) {
  const [state, setState] = useState<State>({ kind: 'opening' });
  const route = useRoute();

  useEffect(() => {
    // The first 401 of any call ends the page's access: every page unmounts, and with it every poll.
    const unsubscribe = onAccessLost(() =>
      setState((old) => (old.kind === 'closed' ? old : { kind: 'closed', why: 'expired' })),
    );
    openSession(linkToken).then(
      (opened) =>
        setState(typeof opened === 'string' ? { kind: 'closed', why: opened } : { kind: 'open', session: opened }),
      (error: Error) => setState({ kind: 'failed', error }),
    );
    return unsubscribe;
  }, []);

  if (state.kind === 'opening') {
    return (
      <main class="centered">
        <p role="status">Opening the portal…</p>
      </main>
    );
  }
  if (state.kind === 'failed') {
    return (
      <main class="centered">
        <h1>The portal could not open</h1>
        <ErrorText error={state.error} />
      </main>
    );
  }
  if (state.kind === 'closed') {
    const { title, text } = CLOSED_TEXT[state.why];
    return (
      <main class="centered">
        <h1>{title}</h1>
        <p role="alert" class="closed">
          {text}
        </p>
      </main>
    );
  }
  return (
    <Shell session={state.session} route={route} onSignedOut={() => setState({ kind: 'closed', why: 'signed_out' })} />
  );
}

const NAV: (Tab & { key: Route['page'] })[] = [
  { key: 'endpoints', label: 'Endpoints', href: href.endpoints },
  { key: 'deliveries', label: 'Delivery log', href: href.deliveries() },
  { key: 'events', label: 'Events', href: href.events() },
  { key: 'catalogue', label: 'Event catalogue', href: href.catalogue },
  { key: 'notices', label: 'Notices', href: href.notices },
];

function Shell({ session, route, onSignedOut }: { session: Session; route: Route; onSignedOut: () => void }) {
  const [error, setError] = useState<Error>();
  const leave = () => {
    signOut().then(() => {
      // Signed out before access ends, so the page says so rather than "expired"; nothing is sent after.
      onSignedOut();
      endAccess();
    }, setError);
  };
  return (
    <>
      <a class="skip" href="#main" onClick={skipToMain}>
        Skip to content
      </a>
      <header class="top">
        <div class="brand">
          <span aria-hidden="true">⇢</span> Hookline <span class="muted">vendor portal</span>
        </div>
        <dl class="who">
          <div>
            <dt>Vendor</dt>
            <dd>
              <code>{session.vendor_id}</code>
            </dd>
          </div>
          <div>
            <dt>Permission</dt>
            <dd title={PERMISSION_TEXT[session.permission]}>
              {session.permission} <span class="muted">({PERMISSION_TEXT[session.permission]})</span>
            </dd>
          </div>
          <div>
            <dt>Expires</dt>
            <dd>
              <ExpiresIn expiresAt={session.expires_at} />
            </dd>
          </div>
        </dl>
        <button type="button" class="signout" onClick={leave}>
          Sign out
        </button>
      </header>
      <TabBar label="Portal" tabs={NAV} current={route.page} />
      <main id="main" tabIndex={-1}>
        <ExpiryWarning expiresAt={session.expires_at} />
        <ErrorText error={error} />
        {route.page === 'endpoints' && <EndpointsPage session={session} />}
        {route.page === 'deliveries' && (
          <DeliveriesPage session={session} webhookId={route.webhookId} deliveryId={route.deliveryId} />
        )}
        {route.page === 'events' && <EventsPage session={session} webhookId={route.webhookId} />}
        {route.page === 'catalogue' && <CataloguePage />}
        {route.page === 'notices' && <NoticesPage session={session} />}
      </main>
    </>
  );
}

/** The skip link moves focus without touching the fragment, which holds the route. */
function skipToMain(event: Event) {
  event.preventDefault();
  document.getElementById('main')?.focus();
}
