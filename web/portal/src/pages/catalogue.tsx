import { call } from '../api';
import { ErrorText, Loading } from '../components';
import { eventTypeName } from '../format';
import { useResource } from '../hooks';
import type { CatalogueEntry } from '../types';
import { SNIPPETS } from '../verify-snippets';

const json = (value: unknown) => JSON.stringify(value, null, 2);

export function CataloguePage() {
  const catalogue = useResource('catalogue', () => call<{ event_types: CatalogueEntry[] }>('GET', '/portal/v1/catalogue'));
  return (
    <section aria-labelledby="catalogue-title">
      <h1 id="catalogue-title">Event catalogue</h1>
      <p>
        Each event reaches your callback URL as a <code>POST</code> with a JSON body: the envelope (<code>version</code>, <code>event_id</code>,{' '}
        <code>event_type</code>, <code>timestamp</code>) around the event’s <code>data</code>. <code>event_id</code> is also the <code>webhook-id</code> header
        and stays the same on every retry and replay: deduplicate on it. A test event carries <code>{'{"test": true, "message": …}'}</code> as its data.
      </p>
      <nav aria-label="On this page" class="toc">
        <a href="#/catalogue" onClick={jump('types')}>
          Event types
        </a>
        <a href="#/catalogue" onClick={jump('verify')}>
          Verify a signature
        </a>
      </nav>
      <h2 id="types">Event types</h2>
      <ErrorText error={catalogue.error} />
      {catalogue.data === undefined ? (
        catalogue.loading && <Loading what="the catalogue" />
      ) : (
        <ul class="cards">
          {catalogue.data.event_types.map((entry) => (
            <li key={entry.event_type}>
              <article class="card" aria-labelledby={`ev-${entry.event_type}`}>
                <h3 id={`ev-${entry.event_type}`}>
                  {eventTypeName(entry.event_type)} <code class="type">{entry.event_type}</code>
                </h3>
                <p>{entry.description}</p>
                <details open>
                  <summary>Sample body</summary>
                  <pre class="code">{json(entry.sample)}</pre>
                </details>
                <details>
                  <summary>JSON Schema</summary>
                  <pre class="code">{json(entry.schema)}</pre>
                </details>
              </article>
            </li>
          ))}
        </ul>
      )}
      <h2 id="verify">Verify a signature</h2>
      <p>Check every request before you trust it. When your webhook has a secret, each request carries these headers:</p>
      <ul>
        <li>
          <code>webhook-id</code> (the event id), <code>webhook-timestamp</code> (Unix seconds of this attempt) and <code>webhook-signature</code>:{' '}
          <code>v1,</code> followed by the base64 HMAC-SHA256 of <code>{'{webhook-id}.{webhook-timestamp}.{body}'}</code>. During a secret rotation it holds two
          space-separated signatures, one per secret: accept the request when any of them matches.
        </li>
        <li>
          The HMAC key: for a secret that starts with <code>whsec_</code>, the base64-decoded text after the prefix; for any other secret, its UTF-8 bytes.
        </li>
        <li>Sign the raw body bytes as received, before parsing the JSON; compare in constant time; refuse a timestamp more than 5 minutes from now.</li>
        <li>
          <code>x-webhook-signature</code> (the platform’s older scheme): <code>sha256=</code> and the hex HMAC-SHA256 of the body keyed by the whole secret as
          text.
        </li>
      </ul>
      {SNIPPETS.map((snippet, i) => (
        <details key={snippet.title} class="snippet-box" open={i === 0}>
          <summary>{snippet.title}</summary>
          {snippet.install && <pre class="code">{snippet.install}</pre>}
          <pre class="code">{snippet.code}</pre>
        </details>
      ))}
    </section>
  );
}

/** In-page jumps without changing the fragment, which holds the route. */
const jump = (id: string) => (event: Event) => {
  event.preventDefault();
  document.getElementById(id)?.scrollIntoView();
};
