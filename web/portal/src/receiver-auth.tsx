import type { ComponentChildren } from 'preact';
import { Badge } from './components';
import { formatTime, fromNow } from './format';
import {
  certificateExpiry,
  HEADERS_MAX,
  secretState,
  type AuthFields,
  type FieldProblem,
  type ProblemField,
  type ReceiverForm,
} from './receiver-auth-changes';
import type { AuthType, ClientCertificate, ReceiverAuth, Webhook } from './types';

/**
 * A webhook's receiver authentication in the page: the webhook form's section for its custom
 * headers, Authorization and client certificate (what it sends is receiver-auth-changes.ts's), and
 * what the webhook's card says of them. No secret is ever shown: the API answers none.
 */

/** The id of a field of the section in the form `formId`, the one a problem with it focuses. */
export const fieldId = (formId: string, field: ProblemField) => `${field}-${formId}`;

const AUTH_LABELS: Record<AuthType, string> = {
  basic: 'Basic (username and password)',
  bearer: 'Bearer token',
  oauth2_client_credentials: 'OAuth2 client credentials',
};

/** A problem with one field, right below it; the field names it with aria-describedby. */
function FieldError({ id, problem }: { id: string; problem: FieldProblem }) {
  return (
    <p class="error field-error" role="alert" id={id}>
      <span aria-hidden="true">⚠</span> {problem.message}
    </p>
  );
}

interface SectionProps {
  formId: string;
  webhook: Webhook | undefined;
  form: ReceiverForm;
  onChange: (form: ReceiverForm) => void;
  /** The problems to show, each next to its field (none until the vendor first tries to save). */
  problems: FieldProblem[];
  /** The callback URL being saved is on another origin: saved secrets must be typed again. */
  originMoved: boolean;
  open: boolean;
  onToggle: (open: boolean) => void;
}

/** The form's "Receiver authentication" section: collapsed unless the webhook has some, or a problem in it needs fixing. */
export function ReceiverAuthSection(props: SectionProps) {
  const { formId, form, onChange, problems } = props;
  const field: FieldOf = (name) => {
    const problem = problems.find((p) => p.field === name);
    const id = fieldId(formId, name);
    return {
      input: {
        id,
        'aria-invalid': problem ? true : undefined,
        'aria-describedby': problem ? `${id}-problem` : undefined,
      },
      error: problem ? <FieldError id={`${id}-problem`} problem={problem} /> : null,
      problem,
    };
  };
  return (
    <details class="section" open={props.open} onToggle={(e) => props.onToggle(e.currentTarget.open)}>
      <summary>Receiver authentication</summary>
      <div class="section-body">
        <p class="hint">
          Optional: custom headers, an Authorization header or a client certificate, for an endpoint behind a gateway
          that asks for them. Secrets are stored encrypted and never shown again, here or in the delivery log.
        </p>
        <CustomHeaders
          formId={formId}
          rows={form.headers}
          onChange={(headers) => onChange({ ...form, headers })}
          field={field}
        />
        <Authorization
          formId={formId}
          saved={props.webhook?.auth ?? null}
          moved={props.originMoved}
          fields={form.auth}
          onChange={(auth) => onChange({ ...form, auth })}
          field={field}
        />
        <Certificate
          saved={props.webhook?.tls_client_certificate ?? null}
          form={form}
          onChange={onChange}
          field={field}
        />
      </div>
    </details>
  );
}

/** A field's input attributes (its id, and its problem's when it has one), and the problem shown below it. */
interface FieldParts {
  input: { id: string; 'aria-invalid': true | undefined; 'aria-describedby': string | undefined };
  error: ComponentChildren;
  problem: FieldProblem | undefined;
}
type FieldOf = (name: ProblemField) => FieldParts;

/** Input attributes for a name, token or PEM: nothing to correct, capitalise or remember. */
const VERBATIM = { autoComplete: 'off', spellcheck: false, autoCapitalize: 'off', autocorrect: 'off' } as const;

function CustomHeaders({
  formId,
  rows,
  onChange,
  field,
}: {
  formId: string;
  rows: ReceiverForm['headers'];
  onChange: (rows: ReceiverForm['headers']) => void;
  field: FieldOf;
}) {
  const update = (key: number, change: { name?: string; value?: string }) =>
    onChange(rows.map((row) => (row.key === key ? { ...row, ...change } : row)));
  const add = () => onChange([...rows, { key: Math.max(-1, ...rows.map((r) => r.key)) + 1, name: '', value: '' }]);
  return (
    <fieldset>
      <legend>Custom headers</legend>
      {rows.length > 0 && (
        <div class="header-row header-cols" aria-hidden="true">
          <span>Name</span>
          <span>Value</span>
        </div>
      )}
      {rows.map((row, i) => {
        const name = field(`name-${row.key}`);
        const value = field(`value-${row.key}`);
        const kept = row.saved !== undefined && row.name.trim() === row.saved;
        return (
          <div key={row.key} class="header-entry">
            <div class="header-row">
              <input
                {...name.input}
                {...VERBATIM}
                aria-label={`Header ${i + 1} name`}
                placeholder="X-Api-Key"
                value={row.name}
                onInput={(e) => update(row.key, { name: e.currentTarget.value })}
              />
              <input
                {...value.input}
                {...VERBATIM}
                class="header-value"
                aria-label={`Header ${i + 1} value`}
                placeholder={kept ? 'unchanged — type to replace' : 'value'}
                value={row.value}
                onInput={(e) => update(row.key, { value: e.currentTarget.value })}
              />
              <button
                type="button"
                class="small"
                aria-label={`Remove header ${row.name.trim() || i + 1}`}
                onClick={() => onChange(rows.filter((r) => r.key !== row.key))}
              >
                Remove
              </button>
            </div>
            {name.error}
            {value.error}
          </div>
        );
      })}
      <div class="actions">
        <button
          type="button"
          class="small"
          id={`add-header-${formId}`}
          disabled={rows.length >= HEADERS_MAX}
          onClick={add}
        >
          Add a header
        </button>
        {rows.length >= HEADERS_MAX && <span class="muted">{HEADERS_MAX} at most.</span>}
      </div>
      <p class="hint">
        Sent with every delivery: an API key your gateway checks, a tenant id. Names Hookline sends itself (webhook-*,
        Content-Type, User-Agent, Host, connection headers) cannot be used.
      </p>
    </fieldset>
  );
}

/** A password, token or client secret: never shown, so a saved one reads "unchanged" until typed again. */
function SecretField(props: {
  label: string;
  words: string;
  state: ReturnType<typeof secretState>;
  value: string;
  onInput: (value: string) => void;
  field: FieldParts;
}) {
  const { input, error, problem } = props.field;
  return (
    <>
      <label for={input.id}>{props.label}</label>
      <input
        {...input}
        type="password"
        autoComplete="new-password"
        spellcheck={false}
        placeholder={
          props.state === 'kept' ? 'unchanged' : props.state === 'new' ? '' : `type the ${props.words} again`
        }
        value={props.value}
        onInput={(e) => props.onInput(e.currentTarget.value)}
      />
      {error}
      {props.state === 'retype' && !problem && props.value === '' && (
        <p class="hint">Saving a change here replaces the whole authentication: type the {props.words} again.</p>
      )}
      {props.state === 'moved' && !problem && props.value === '' && (
        <p class="hint">The callback URL moves to another host: type the {props.words} again to send it there.</p>
      )}
    </>
  );
}

function Authorization({
  formId,
  saved,
  moved,
  fields,
  onChange,
  field,
}: {
  formId: string;
  saved: ReceiverAuth | null;
  moved: boolean;
  fields: AuthFields;
  onChange: (fields: AuthFields) => void;
  field: FieldOf;
}) {
  const set = (change: Partial<AuthFields>) => onChange({ ...fields, ...change });
  const state = secretState(saved, fields, moved);
  const text = (name: ProblemField, label: string, value: string, onInput: (value: string) => void, hint?: string) => {
    const { input, error } = field(name);
    return (
      <>
        <label for={input.id}>{label}</label>
        <input {...input} {...VERBATIM} value={value} onInput={(e) => onInput(e.currentTarget.value)} />
        {error}
        {hint && <p class="hint">{hint}</p>}
      </>
    );
  };
  const typeId = `auth-type-${formId}`;
  return (
    <fieldset>
      <legend>Authorization header</legend>
      <label for={typeId}>Authentication</label>
      <select
        id={typeId}
        value={fields.type}
        onChange={(e) => set({ type: e.currentTarget.value as AuthFields['type'] })}
      >
        <option value="none">None</option>
        {(Object.keys(AUTH_LABELS) as AuthType[]).map((type) => (
          <option key={type} value={type}>
            {AUTH_LABELS[type]}
          </option>
        ))}
      </select>
      {fields.type === 'none' && saved && (
        <p class="hint">Saving removes the {AUTH_LABELS[saved.type]} authentication.</p>
      )}
      {fields.type === 'basic' && (
        <>
          {text('username', 'Username', fields.username, (username) => set({ username }))}
          <SecretField
            label="Password"
            words="password"
            state={state}
            value={fields.password}
            onInput={(password) => set({ password })}
            field={field('password')}
          />
          <p class="hint">Sent as Authorization: Basic with every delivery.</p>
        </>
      )}
      {fields.type === 'bearer' && (
        <>
          <SecretField
            label="Token"
            words="token"
            state={state}
            value={fields.token}
            onInput={(token) => set({ token })}
            field={field('token')}
          />
          <p class="hint">Sent as Authorization: Bearer with every delivery.</p>
        </>
      )}
      {fields.type === 'oauth2_client_credentials' && (
        <>
          {text('token-url', 'Token URL (https)', fields.tokenUrl, (tokenUrl) => set({ tokenUrl }))}
          {text('client-id', 'Client ID', fields.clientId, (clientId) => set({ clientId }))}
          <SecretField
            label="Client secret"
            words="client secret"
            state={state}
            value={fields.clientSecret}
            onInput={(clientSecret) => set({ clientSecret })}
            field={field('client-secret')}
          />
          <label for={`auth-scope-${formId}`}>Scope (optional)</label>
          <input
            id={`auth-scope-${formId}`}
            {...VERBATIM}
            value={fields.scope}
            onInput={(e) => set({ scope: e.currentTarget.value })}
          />
          <label for={`auth-audience-${formId}`}>Audience (optional)</label>
          <input
            id={`auth-audience-${formId}`}
            {...VERBATIM}
            value={fields.audience}
            onInput={(e) => set({ audience: e.currentTarget.value })}
          />
          <label for={`auth-method-${formId}`}>How the client authenticates to the token URL</label>
          <select
            id={`auth-method-${formId}`}
            value={fields.tokenAuthMethod}
            onChange={(e) => set({ tokenAuthMethod: e.currentTarget.value as AuthFields['tokenAuthMethod'] })}
          >
            <option value="client_secret_basic">HTTP Basic (client_secret_basic)</option>
            <option value="client_secret_post">In the request body (client_secret_post)</option>
          </select>
          <p class="hint">
            Hookline fetches a token with these credentials, keeps it until shortly before it expires, and sends it as
            Authorization: Bearer; when your endpoint answers 401 it fetches a new one.
          </p>
        </>
      )}
    </fieldset>
  );
}

function Certificate({
  saved,
  form,
  onChange,
  field,
}: {
  saved: ClientCertificate | null;
  form: ReceiverForm;
  onChange: (form: ReceiverForm) => void;
  field: FieldOf;
}) {
  const cert = field('cert-pem');
  const key = field('key-pem');
  const removing = saved !== null && form.removeCertificate;
  return (
    <fieldset>
      <legend>Client certificate (mutual TLS)</legend>
      {saved && !removing && (
        <div class="cert-current">
          <p>
            Current: <code class="wrap">{saved.subject}</code>, expires{' '}
            <time dateTime={saved.not_after}>{formatTime(saved.not_after)}</time>.
          </p>
          <button type="button" class="small danger" onClick={() => onChange({ ...form, removeCertificate: true })}>
            Remove certificate
          </button>
        </div>
      )}
      {removing ? (
        <div class="notice cert-current" role="status">
          <p>The certificate is removed when you save.</p>
          <button type="button" class="small" onClick={() => onChange({ ...form, removeCertificate: false })}>
            Keep it
          </button>
        </div>
      ) : (
        <>
          <label for={cert.input.id}>{saved ? 'New certificate (PEM), to replace it' : 'Certificate (PEM)'}</label>
          <textarea
            {...cert.input}
            {...VERBATIM}
            placeholder="-----BEGIN CERTIFICATE-----"
            value={form.certPem}
            onInput={(e) => onChange({ ...form, certPem: e.currentTarget.value })}
          />
          {cert.error}
          <label for={key.input.id}>{saved ? 'Its private key (PEM)' : 'Private key (PEM)'}</label>
          <textarea
            {...key.input}
            {...VERBATIM}
            placeholder="-----BEGIN PRIVATE KEY-----"
            value={form.keyPem}
            onInput={(e) => onChange({ ...form, keyPem: e.currentTarget.value })}
          />
          {key.error}
        </>
      )}
      <p class="hint">
        For an https endpoint that asks for a client certificate; the certificate may be followed by its intermediate CA
        certificates. Paste the key unencrypted: Hookline stores it encrypted and never shows it.
      </p>
    </fieldset>
  );
}

/** `AB:CD:EF:01…67:89:AB:CD`: the ends of a fingerprint, enough to compare at a glance. */
function shortFingerprint(fingerprint: string): string {
  const bytes = fingerprint.split(':');
  return bytes.length <= 8 ? fingerprint : `${bytes.slice(0, 4).join(':')}…${bytes.slice(-4).join(':')}`;
}

/** The authentication in words, with its non-secret fields. */
function AuthFacts({ auth }: { auth: ReceiverAuth }) {
  if (auth.type === 'basic')
    return (
      <>
        Basic, username <code class="wrap">{auth.username}</code>
      </>
    );
  if (auth.type === 'bearer') return <>Bearer token</>;
  return (
    <>
      OAuth2 client credentials: client <code class="wrap">{auth.client_id}</code> from{' '}
      <code class="wrap">{auth.token_url}</code>
      <p class="hint">
        {[
          auth.scope && `scope ${auth.scope}`,
          auth.audience && `audience ${auth.audience}`,
          auth.token_auth_method === 'client_secret_post'
            ? 'client secret in the request body'
            : 'client secret by HTTP Basic',
        ]
          .filter(Boolean)
          .join('; ')}
      </p>
    </>
  );
}

function CertificateFacts({ certificate }: { certificate: ClientCertificate }) {
  const expiry = certificateExpiry(certificate.not_after, Date.now());
  return (
    <>
      <code class="wrap">{certificate.subject}</code>{' '}
      {expiry === 'soon' && (
        <Badge label={{ icon: '⚠', text: `Expires ${fromNow(certificate.not_after)}`, tone: 'warn' }} />
      )}
      {expiry === 'expired' && <Badge label={{ icon: '✗', text: 'Expired: renew it', tone: 'bad' }} />}
      <p class="hint">
        {certificate.issuer === certificate.subject ? 'Self-signed' : `Issued by ${certificate.issuer}`}; expires{' '}
        <time dateTime={certificate.not_after}>{formatTime(certificate.not_after)}</time>
        <br />
        SHA-256 fingerprint{' '}
        <code class="fingerprint" title={certificate.fingerprint_sha256}>
          {shortFingerprint(certificate.fingerprint_sha256)}
        </code>
      </p>
    </>
  );
}

/** The card's lines for the webhook's custom headers (values masked as the API gives them), auth and client certificate. */
export function ReceiverAuthFacts({ webhook }: { webhook: Webhook }) {
  const headers = Object.entries(webhook.headers);
  return (
    <>
      {headers.length > 0 && (
        <div>
          <dt>Custom headers</dt>
          <dd>
            <ul class="header-names">
              {headers.map(([name, masked]) => (
                <li key={name}>
                  <code class="wrap">
                    {name}: {masked}
                  </code>
                </li>
              ))}
            </ul>
          </dd>
        </div>
      )}
      {webhook.auth && (
        <div>
          <dt>Authorization</dt>
          <dd>
            <AuthFacts auth={webhook.auth} />
          </dd>
        </div>
      )}
      {webhook.tls_client_certificate && (
        <div>
          <dt>Client certificate</dt>
          <dd>
            <CertificateFacts certificate={webhook.tls_client_certificate} />
          </dd>
        </div>
      )}
    </>
  );
}
