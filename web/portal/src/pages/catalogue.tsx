import { call } from '../api';
import { ErrorText, Loading } from '../components';
import { FILTER_EXAMPLE } from '../filter-example';
import { eventTypeName } from '../format';
import { useResource } from '../hooks';
import type { CatalogueEntry } from '../types';
import { SNIPPETS } from '../verify-snippets';

const json = (value: unknown) => JSON.stringify(value, null, 2);

export function CataloguePage() {
  const catalogue = useResource('catalogue', () =>
    call<{ event_types: CatalogueEntry[] }>('GET', '/portal/v1/catalogue'),
  );
  return (
    <section aria-labelledby="catalogue-title">
      <h1 id="catalogue-title">Event catalogue</h1>
      <p>
        Each event reaches your callback URL as a <code>POST</code> with a JSON body: the envelope (<code>version</code>
        , <code>event_id</code>, <code>event_type</code>, <code>timestamp</code>) around the event’s <code>data</code>.{' '}
        <code>event_id</code> is also the <code>webhook-id</code> header and stays the same on every retry and replay:
        deduplicate on it. A test event carries <code>{'{"test": true, "message": …}'}</code> as its data.
      </p>
      <nav aria-label="On this page" class="toc">
        <a href="#/catalogue" onClick={jump('types')}>
          Event types
        </a>
        <a href="#/catalogue" onClick={jump('verify')}>
          Verify a signature
        </a>
        <a href="#/catalogue" onClick={jump('filters')}>
          Payload filters
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
      <p>
        Check every request before you trust it. When your webhook has a secret, each request carries these headers:
      </p>
      <ul>
        <li>
          <code>webhook-id</code> (the event id), <code>webhook-timestamp</code> (Unix seconds of this attempt) and{' '}
          <code>webhook-signature</code>: <code>v1,</code> followed by the base64 HMAC-SHA256 of{' '}
          <code>{'{webhook-id}.{webhook-timestamp}.{body}'}</code>. During a secret rotation it holds two
          space-separated signatures, one per secret: accept the request when any of them matches.
        </li>
        <li>
          The HMAC key: for a secret that starts with <code>whsec_</code>, the base64-decoded text after the prefix; for
          any other secret, its UTF-8 bytes.
        </li>
        <li>
          Sign the raw body bytes as received, before parsing the JSON; compare in constant time; refuse a timestamp
          more than 5 minutes from now.
        </li>
        <li>
          <code>x-webhook-signature</code> (the platform’s older scheme): <code>sha256=</code> and the hex HMAC-SHA256
          of the body keyed by the whole secret as text.
        </li>
        <li>
          With the Ed25519 signature on (Edit → Signature), <code>webhook-signature</code> also holds <code>v1a,</code>{' '}
          and the base64 Ed25519 signature of the same content. Verify it with the webhook’s public key (
          <code>whpk_…</code>, shown on its card; or the key set at <code>/.well-known/jwks.json</code>, narrowed to
          your webhook with <code>?webhook_id=</code>; key ids are opaque): no secret needed. A webhook without a secret
          sends <code>v1a</code> alone.
        </li>
      </ul>
      {SNIPPETS.map((snippet, i) => (
        <details key={snippet.title} class="snippet-box" open={i === 0}>
          <summary>{snippet.title}</summary>
          {snippet.install && <pre class="code">{snippet.install}</pre>}
          <pre class="code">{snippet.code}</pre>
        </details>
      ))}
      <h2 id="filters">Payload filters</h2>
      <p>
        A webhook may carry a filter (Edit → Payload filter): only the events it matches are sent; the others are not
        failures and are not retried. A filter is JSON over the body above: one comparison, or <code>and</code>,{' '}
        <code>or</code>, <code>not</code> of them.
      </p>
      <pre class="code">{json(FILTER_EXAMPLE)}</pre>
      <ul>
        <li>
          Comparisons: <code>eq</code>, <code>ne</code> (strict: <code>3</code> is not <code>"3"</code>),{' '}
          <code>in</code> (a list of values), <code>gt</code>, <code>gte</code>, <code>lt</code>, <code>lte</code>{' '}
          (numbers only), <code>exists</code> (<code>true</code> or <code>false</code>).
        </li>
        <li>
          Paths: <code>event_type</code>, <code>event_id</code>, <code>timestamp</code>, <code>version</code>, or{' '}
          <code>data</code> and keys below it, joined by dots; a number steps into a list (
          <code>data.hardware_specs.gpus.0.name</code>).
        </li>
        <li>
          At most 6 levels, 50 comparisons and 4 KiB. “Try on a sample event” and “Try on the newest event” in the
          editor show why an event matches or not.
        </li>
      </ul>
    </section>
  );
}

/** In-page jumps without changing the fragment, which holds the route. */
const jump = (id: string) => (event: Event) => {
  event.preventDefault();
  document.getElementById(id)?.scrollIntoView();
};
