/**
 * What the webhook form sends of a webhook's receiver authentication (custom headers, Authorization,
 * client certificate), apart from the page (receiver-auth.tsx draws it), so the rules read in one place.
 *
 * Reads never show a secret, so the form cannot show one either: a saved header keeps its value
 * until one is typed, and a saved password, token, client secret or key stays empty. That shapes
 * what is sent. Headers are merged by the API (a JSON merge patch), so an edit sends only the rows
 * that changed, and `name: null` for a removed one. `auth` is replaced whole, so a change to its
 * other fields needs its secret typed again: sending the change without it is refused here, with
 * words that say why, rather than by the API. So is a callback URL moved to another origin while a
 * saved header value or secret would follow it unseen: the API refuses that too (409
 * credentials_not_restated), and here the fields to type again say so.
 */

import type { AuthType, ClientCertificate, ReceiverAuth, TokenAuthMethod, Webhook } from './types.js';

/** As many custom headers as the API keeps. */
export const HEADERS_MAX = 10;

/** How long before a client certificate expires the card warns about it. */
const CERTIFICATE_WARNING_MS = 30 * 86_400_000;

/** One row of the custom headers; `saved`: the name the webhook has it under, for a row it already had. */
interface HeaderRow {
  key: number;
  name: string;
  /** Empty for a saved row until a new value is typed: the saved one is never shown. */
  value: string;
  saved?: string;
}

export interface AuthFields {
  type: AuthType | 'none';
  username: string;
  password: string;
  token: string;
  tokenUrl: string;
  clientId: string;
  clientSecret: string;
  scope: string;
  audience: string;
  tokenAuthMethod: TokenAuthMethod;
}

export interface ReceiverForm {
  headers: HeaderRow[];
  auth: AuthFields;
  certPem: string;
  keyPem: string;
  /** The saved client certificate goes on save. */
  removeCertificate: boolean;
}

/** A field of the form with something to fix: a header row's `name-<key>` or `value-<key>`, or an auth or certificate field. */
export type ProblemField =
  | `name-${number}`
  | `value-${number}`
  | 'username'
  | 'password'
  | 'token'
  | 'token-url'
  | 'client-id'
  | 'client-secret'
  | 'cert-pem'
  | 'key-pem';

export interface FieldProblem {
  field: ProblemField;
  message: string;
}

/** What the POST or PATCH body gets for these fields; a field left out is not changed. */
export interface ReceiverBody {
  headers?: Record<string, string | null>;
  auth?: Record<string, string> | null;
  tls_client_certificate?: { cert_pem: string; key_pem: string } | null;
}

/** The form's starting state: the webhook's headers by name with empty values, its auth's non-secret fields. */
export function receiverForm(webhook: Webhook | undefined): ReceiverForm {
  const auth = webhook?.auth ?? null;
  return {
    headers: Object.keys(webhook?.headers ?? {}).map((name, key) => ({ key, name, value: '', saved: name })),
    auth: {
      type: auth?.type ?? 'none',
      username: auth?.username ?? '',
      password: '',
      token: '',
      tokenUrl: auth?.token_url ?? '',
      clientId: auth?.client_id ?? '',
      clientSecret: '',
      scope: auth?.scope ?? '',
      audience: auth?.audience ?? '',
      tokenAuthMethod: auth?.token_auth_method ?? 'client_secret_basic',
    },
    certPem: '',
    keyPem: '',
    removeCertificate: false,
  };
}

/** Whether the webhook has any of the three: the form then opens its section at once. */
export function hasReceiverAuth(webhook: Webhook | undefined): boolean {
  return (
    webhook !== undefined &&
    (Object.keys(webhook.headers).length > 0 || webhook.auth !== null || webhook.tls_client_certificate !== null)
  );
}

/** The secret field of an auth type, and what to call it in a sentence. */
const SECRET_OF: Record<AuthType, { field: 'password' | 'token' | 'client-secret'; words: string }> = {
  basic: { field: 'password', words: 'password' },
  bearer: { field: 'token', words: 'token' },
  oauth2_client_credentials: { field: 'client-secret', words: 'client secret' },
};

/** The secret typed for the chosen type. */
function secretOf(fields: AuthFields, type: AuthType): string {
  return type === 'basic' ? fields.password : type === 'bearer' ? fields.token : fields.clientSecret;
}

/** Whether the non-secret fields differ from what the webhook's auth (of the same type) has. */
function authSettingsChanged(saved: ReceiverAuth, fields: AuthFields): boolean {
  if (saved.type === 'basic') return fields.username !== (saved.username ?? '');
  if (saved.type === 'bearer') return false;
  return (
    fields.tokenUrl.trim() !== (saved.token_url ?? '') ||
    fields.clientId !== (saved.client_id ?? '') ||
    fields.scope.trim() !== (saved.scope ?? '') ||
    fields.audience.trim() !== (saved.audience ?? '') ||
    fields.tokenAuthMethod !== (saved.token_auth_method ?? 'client_secret_basic')
  );
}

/**
 * Whether a new callback URL is on another origin (scheme, host, port) than the saved one: the
 * saved credentials then go with it only when typed again. False while either does not parse (the
 * URL field and the API say what is wrong with it).
 */
export function originMoved(saved: string | undefined, next: string): boolean {
  if (saved === undefined || !URL.canParse(saved) || !URL.canParse(next)) return false;
  return new URL(saved).origin !== new URL(next).origin;
}

/**
 * What a saved auth's secret field says while it is empty: kept, or to be typed again, because its
 * settings changed (`retype`) or the callback URL moves to another origin (`moved`).
 */
export function secretState(
  saved: ReceiverAuth | null | undefined,
  fields: AuthFields,
  moved = false,
): 'new' | 'kept' | 'retype' | 'moved' {
  if (!saved || fields.type !== saved.type) return 'new';
  if (moved) return 'moved';
  return authSettingsChanged(saved, fields) ? 'retype' : 'kept';
}

/** Why a saved value must be typed again when the callback URL moves, ahead of the value's name. */
const MOVED_WORDS = 'the callback URL moves to another host, and the saved';

/** The whole `auth` object the fields make, or the problems that keep it from being sent. */
function authObject(fields: AuthFields, type: AuthType, problems: FieldProblem[]): Record<string, string> {
  const need = (value: string, field: ProblemField, message: string) => {
    if (value.trim() === '') problems.push({ field, message });
  };
  if (type === 'basic') {
    need(fields.username, 'username', 'Type the username.');
    need(fields.password, 'password', 'Type the password.');
    return { type, username: fields.username, password: fields.password };
  }
  if (type === 'bearer') {
    need(fields.token, 'token', 'Type the token.');
    return { type, token: fields.token.trim() };
  }
  need(fields.tokenUrl, 'token-url', 'Type the token URL (https).');
  need(fields.clientId, 'client-id', 'Type the client ID.');
  need(fields.clientSecret, 'client-secret', 'Type the client secret.');
  return {
    type,
    token_url: fields.tokenUrl.trim(),
    client_id: fields.clientId,
    client_secret: fields.clientSecret,
    ...(fields.scope.trim() === '' ? {} : { scope: fields.scope.trim() }),
    ...(fields.audience.trim() === '' ? {} : { audience: fields.audience.trim() }),
    token_auth_method: fields.tokenAuthMethod,
  };
}

/** The `auth` to send: undefined when untouched, null when removed, or the whole new object. */
function authChange(
  saved: ReceiverAuth | null | undefined,
  fields: AuthFields,
  moved: boolean,
  problems: FieldProblem[],
): Record<string, string> | null | undefined {
  const type = fields.type;
  if (type === 'none') return saved ? null : undefined;
  const state = secretState(saved, fields, moved);
  const secretTyped = secretOf(fields, type) !== '';
  if (state === 'kept' && !secretTyped) return undefined;
  if ((state === 'retype' || state === 'moved') && !secretTyped) {
    const { field, words } = SECRET_OF[type];
    problems.push({
      field,
      message:
        state === 'moved'
          ? `Type the ${words} again, or set Authentication to None: ${MOVED_WORDS} ${words} is never shown.`
          : `Type the ${words} again: a change here replaces the whole authentication, and the saved ${words} is never shown.`,
    });
    return undefined;
  }
  return authObject(fields, type, problems);
}

/**
 * The `headers` to send: every row on a new webhook; on an edit, only the rows changed or removed
 * (merged by the API), and, when the callback URL moves to another origin, every kept row's value
 * typed again.
 */
function headersChange(
  saved: Record<string, string> | undefined,
  rows: HeaderRow[],
  moved: boolean,
  problems: FieldProblem[],
): Record<string, string | null> | undefined {
  const removed: string[] = Object.keys(saved ?? {}).filter((name) => !rows.some((row) => row.saved === name));
  const set: [string, string][] = [];
  const seen = new Set<string>();
  for (const row of rows) {
    const name = row.name.trim();
    if (row.saved !== undefined && name !== row.saved) removed.push(row.saved);
    if (name === '' && row.value === '') continue;
    if (name === '') {
      problems.push({ field: `name-${row.key}`, message: 'Type the header’s name.' });
      continue;
    }
    if (seen.has(name.toLowerCase()))
      problems.push({
        field: `name-${row.key}`,
        message: `Header “${name}” is given twice (names are case-insensitive).`,
      });
    seen.add(name.toLowerCase());
    if (row.value !== '') set.push([name, row.value]);
    else if (row.saved === undefined)
      problems.push({ field: `value-${row.key}`, message: `Type the value of ${name}.` });
    else if (name !== row.saved)
      problems.push({
        field: `value-${row.key}`,
        message: `Type the value of ${name} again: a renamed header needs its value, and the saved one is never shown.`,
      });
    else if (moved)
      problems.push({
        field: `value-${row.key}`,
        message: `Type the value of ${name} again, or remove the header: ${MOVED_WORDS} value is never shown.`,
      });
  }
  // Removals first: a header removed and added again under the same name ends up set.
  const change: Record<string, string | null> = {};
  for (const name of removed) change[name] = null;
  for (const [name, value] of set) change[name] = value;
  return Object.keys(change).length === 0 ? undefined : change;
}

/** The client certificate to send: both PEMs, null to remove the saved one, or undefined (nothing typed). */
function certificateChange(
  saved: ClientCertificate | null | undefined,
  form: ReceiverForm,
  problems: FieldProblem[],
): { cert_pem: string; key_pem: string } | null | undefined {
  if (form.removeCertificate && saved) return null;
  const [cert, key] = [form.certPem.trim(), form.keyPem.trim()];
  if (cert === '' && key === '') return undefined;
  if (cert === '') problems.push({ field: 'cert-pem', message: 'Paste the certificate that goes with this key.' });
  if (key === '') problems.push({ field: 'key-pem', message: 'Paste the private key of this certificate.' });
  return { cert_pem: `${cert}\n`, key_pem: `${key}\n` };
}

/**
 * The receiver fields of the body that registers (no `webhook`) or edits a webhook, saved with
 * `callbackUrl` (default: its own), or the problems to fix first, each with its field. Nothing in
 * `body` is to be sent while there are problems.
 */
export function receiverChanges(
  webhook: Webhook | undefined,
  form: ReceiverForm,
  callbackUrl = webhook?.callback_url ?? '',
): { body: ReceiverBody; problems: FieldProblem[] } {
  const problems: FieldProblem[] = [];
  const moved = originMoved(webhook?.callback_url, callbackUrl);
  const headers = headersChange(webhook?.headers, form.headers, moved, problems);
  const auth = authChange(webhook?.auth, form.auth, moved, problems);
  const certificate = certificateChange(webhook?.tls_client_certificate, form, problems);
  return {
    body: {
      ...(headers === undefined ? {} : { headers }),
      ...(auth === undefined ? {} : { auth }),
      ...(certificate === undefined ? {} : { tls_client_certificate: certificate }),
    },
    problems,
  };
}

/** Whether a client certificate expiring at `notAfter` is fine, soon to expire (the card warns), or expired. */
export function certificateExpiry(notAfter: string, nowMs: number): 'valid' | 'soon' | 'expired' {
  const leftMs = Date.parse(notAfter) - nowMs;
  if (!(leftMs > 0)) return 'expired';
  return leftMs <= CERTIFICATE_WARNING_MS ? 'soon' : 'valid';
}
