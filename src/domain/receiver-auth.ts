import { createPrivateKey, X509Certificate, type KeyObject } from 'node:crypto';
import { z } from 'zod';

/**
 * How a webhook proves itself to its receiver beyond the signature: custom request headers, an
 * Authorization scheme (basic, bearer, or an OAuth2 client-credentials token) and a TLS client
 * certificate. Their secret parts are sealed at rest and never shown: reads show names, types and
 * the non-secret fields only.
 */

/** What stands in for a secret value in every read and in the delivery log. */
export const SECRET_MASK = '••••';

const CUSTOM_HEADERS_MAX = 10;
const HEADER_NAME_MAX_CHARS = 64;
const HEADER_VALUE_MAX_CHARS = 4096;
const AUTH_FIELD_MAX_CHARS = 1024;
const PEM_MAX_CHARS = 64 * 1024;

/** RFC 9110 token characters. */
const HEADER_NAME_RE = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Visible ASCII, space and tab: no control characters (no header splitting) and no non-ASCII. */
const HEADER_VALUE_RE = /^[\t\x20-\x7e]*$/;

/** Names the engine sets itself or HTTP reserves for the connection: a custom header may not take them. */
const RESERVED_HEADER_NAMES = new Set([
  'host',
  'content-length',
  'content-type',
  'user-agent',
  'connection',
  'keep-alive',
  'transfer-encoding',
  'te',
  'trailer',
  'upgrade',
  'expect',
  'proxy-authorization',
  'proxy-connection',
]);

/** Why a custom header name is refused, or undefined. `authorization` is refused only beside `auth` (see headersAuthProblem). */
export function headerNameProblem(name: string): string | undefined {
  if (name.length === 0 || name.length > HEADER_NAME_MAX_CHARS || !HEADER_NAME_RE.test(name))
    return `header name "${name.slice(0, HEADER_NAME_MAX_CHARS)}" must be 1 to ${HEADER_NAME_MAX_CHARS} token characters (RFC 9110)`;
  const lower = name.toLowerCase();
  if (lower.startsWith('webhook-') || lower.startsWith('x-webhook-') || RESERVED_HEADER_NAMES.has(lower))
    return `header "${name}" cannot be set: the engine sends it (webhook-*, x-webhook-*, host, content-length, content-type, user-agent and connection headers are reserved)`;
  return undefined;
}

/** A header named `authorization` would replace the one `auth` sends. */
export function headersAuthProblem(headerNames: readonly string[], hasAuth: boolean): string | undefined {
  const clash = headerNames.find((name) => name.toLowerCase() === 'authorization');
  return clash !== undefined && hasAuth
    ? `header "${clash}" cannot be set while the webhook has auth, which sends it; remove one of them`
    : undefined;
}

/** The problem with a set of custom headers (after a PATCH merged it), or undefined. */
export function headersProblem(headers: readonly (readonly [string, string])[]): string | undefined {
  if (headers.length > CUSTOM_HEADERS_MAX) return `headers must have at most ${CUSTOM_HEADERS_MAX} entries`;
  const seen = new Set<string>();
  for (const [name, value] of headers) {
    const problem = headerNameProblem(name);
    if (problem !== undefined) return problem;
    const lower = name.toLowerCase();
    if (seen.has(lower)) return `header "${name}" is given twice (names are case-insensitive)`;
    seen.add(lower);
    if (value.length === 0 || value.length > HEADER_VALUE_MAX_CHARS || !HEADER_VALUE_RE.test(value))
      return `the value of header "${name}" must be 1 to ${HEADER_VALUE_MAX_CHARS} printable ASCII characters`;
  }
  return undefined;
}

const boundedString = (field: string, max = AUTH_FIELD_MAX_CHARS) =>
  z
    .string({ error: (issue) => (issue.input === undefined ? `${field} is required` : `${field} must be a string`) })
    .min(1, { error: `${field} must not be empty` })
    .max(max, { error: `${field} must be at most ${max} characters` });

const strictAuth = <T extends z.core.$ZodLooseShape>(shape: T) =>
  z.strictObject(shape, {
    error: (issue) =>
      issue.code === 'unrecognized_keys'
        ? `unknown field ${issue.keys.map((k) => `"auth.${k}"`).join(', ')}`
        : 'auth must be an object',
  });

/**
 * Words that mark a query parameter as a secret in a token URL: any name holding one (lower-cased,
 * `-` read as `_`), and the whole names of SECRET_QUERY_NAMES (too short, or too common inside other
 * words, to look for within names). The URL is stored in the clear and shown to
 * every read, read-only portal sessions included, while the client secret has a sealed field of its
 * own; RFC 6749 §2.3.1 forbids client credentials in the request URI anyway. Other parameters (an
 * Azure AD B2C policy `p`, an `api-version`, a `tenant`) stay, as token endpoints may need them.
 */
const SECRET_QUERY_WORDS = ['secret', 'password', 'passwd', 'pwd', 'token', 'key', 'auth', 'credential', 'signature'];
const SECRET_QUERY_NAMES = new Set(['sig', 'code', 'assertion', 'client_assertion']);

/** The query parameter names of `url` that look like secrets (see SECRET_QUERY_WORDS), each once. */
function secretQueryNames(url: URL): string[] {
  const names = [...new Set(url.searchParams.keys())];
  return names.filter((name) => {
    const normal = name.toLowerCase().replace(/-/g, '_');
    return SECRET_QUERY_NAMES.has(normal) || SECRET_QUERY_WORDS.some((word) => normal.includes(word));
  });
}

/**
 * Why `text` is not an acceptable OAuth2 token URL, or undefined: https, no credentials
 * (`user:pass@`) and no query parameter named like a secret, since the URL is stored and shown as
 * it is; no fragment (never sent). Its target is checked by the caller (the SSRF rules).
 */
export function tokenUrlProblem(text: string): string | undefined {
  if (!/^https:\/\/[^\s]+$/.test(text) || !URL.canParse(text)) return 'auth.token_url must be an https URL';
  const url = new URL(text);
  if (url.username !== '' || url.password !== '')
    return 'auth.token_url must not contain credentials (user:password@): give them as auth.client_id and auth.client_secret, which is sealed';
  if (url.hash !== '') return 'auth.token_url must not contain a fragment';
  const secrets = secretQueryNames(url);
  if (secrets.length > 0)
    return (
      `auth.token_url must not carry secrets in its query (${secrets.map((name) => `"${name}"`).join(', ')}): ` +
      'the URL is stored and shown as it is; give the client secret as auth.client_secret, which is sealed'
    );
  return undefined;
}

/**
 * A token URL as reads show it: credentials and the values of secret-named query parameters
 * masked. Only a URL stored before tokenUrlProblem refused them has any.
 */
function shownTokenUrl(text: string): string {
  if (!URL.canParse(text)) return text;
  const url = new URL(text);
  const secrets = new Set(secretQueryNames(url));
  const credentials = url.username !== '' || url.password !== '';
  if (!credentials && secrets.size === 0) return text;
  const query = [...url.searchParams].map(
    ([name, value]) => `${encodeURIComponent(name)}=${secrets.has(name) ? SECRET_MASK : encodeURIComponent(value)}`,
  );
  return `${url.protocol}//${credentials ? `${SECRET_MASK}@` : ''}${url.host}${url.pathname}${query.length === 0 ? '' : `?${query.join('&')}`}`;
}

export const TOKEN_AUTH_METHODS = ['client_secret_basic', 'client_secret_post'] as const;
type TokenAuthMethod = (typeof TOKEN_AUTH_METHODS)[number];

/** `auth` as a vendor sends it; the URL of a token endpoint is checked further by the caller (SSRF). */
export const authInputSchema = z
  .discriminatedUnion(
    'type',
    [
      strictAuth({
        type: z.literal('basic'),
        username: boundedString('auth.username', 256).refine((text) => !text.includes(':'), {
          error: 'auth.username must not contain ":" (RFC 7617)',
        }),
        password: boundedString('auth.password'),
      }),
      strictAuth({
        type: z.literal('bearer'),
        token: boundedString('auth.token', HEADER_VALUE_MAX_CHARS).regex(/^[\x21-\x7e]+$/, {
          error: 'auth.token must be visible ASCII characters without spaces',
        }),
      }),
      strictAuth({
        type: z.literal('oauth2_client_credentials'),
        token_url: boundedString('auth.token_url', 2048).superRefine((text, ctx) => {
          const problem = tokenUrlProblem(text);
          if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
        }),
        client_id: boundedString('auth.client_id', 256),
        client_secret: boundedString('auth.client_secret'),
        scope: boundedString('auth.scope').optional(),
        audience: boundedString('auth.audience').optional(),
        token_auth_method: z
          .enum(TOKEN_AUTH_METHODS, { error: `auth.token_auth_method must be one of ${TOKEN_AUTH_METHODS.join(', ')}` })
          .optional(),
      }),
    ],
    { error: 'auth.type must be one of basic, bearer, oauth2_client_credentials' },
  )
  .meta({
    description:
      'How each request authenticates to the receiver, in its Authorization header. basic: {"type": "basic", "username", "password"}; ' +
      'bearer: {"type": "bearer", "token"}; oauth2_client_credentials: {"type": "oauth2_client_credentials", "token_url" (https, ' +
      'without user:password@ or secret-named query parameters such as client_secret, token or key: it is shown as it is), ' +
      '"client_id", "client_secret", "scope"?, "audience"?, "token_auth_method"? (client_secret_basic, the default, or ' +
      'client_secret_post)}: Hookline fetches a token from token_url (under the SSRF guard), keeps it until shortly before it ' +
      'expires, shares it among its workers, and fetches a new one once when the receiver answers 401. Secrets are sealed at ' +
      'rest and never shown; reads show the type and the other fields.',
  });

export type AuthInput = z.infer<typeof authInputSchema>;

/** `auth` as reads show it: the type and non-secret fields. */
export const authViewSchema = z
  .object({
    type: z.enum(['basic', 'bearer', 'oauth2_client_credentials']),
    username: z.string().optional().describe('basic'),
    token_url: z.string().optional().describe('oauth2_client_credentials'),
    client_id: z.string().optional().describe('oauth2_client_credentials'),
    scope: z.string().optional().describe('oauth2_client_credentials, when set'),
    audience: z.string().optional().describe('oauth2_client_credentials, when set'),
    token_auth_method: z.enum(TOKEN_AUTH_METHODS).optional().describe('oauth2_client_credentials'),
  })
  .meta({
    id: 'ReceiverAuth',
    description: 'The receiver authentication: its type and non-secret fields (no password, token or client secret).',
  });

/** A webhook's receiver authentication as the engine holds it; secret fields are undefined in a process without the key. */
export type ReceiverAuth =
  | { type: 'basic'; username: string; password: string | undefined }
  | { type: 'bearer'; token: string | undefined }
  | {
      type: 'oauth2_client_credentials';
      tokenUrl: string;
      clientId: string;
      clientSecret: string | undefined;
      scope: string | undefined;
      audience: string | undefined;
      tokenAuthMethod: TokenAuthMethod;
    };

export function authFromInput(input: AuthInput): ReceiverAuth {
  switch (input.type) {
    case 'basic':
      return { type: 'basic', username: input.username, password: input.password };
    case 'bearer':
      return { type: 'bearer', token: input.token };
    case 'oauth2_client_credentials':
      return {
        type: 'oauth2_client_credentials',
        tokenUrl: input.token_url,
        clientId: input.client_id,
        clientSecret: input.client_secret,
        scope: input.scope,
        audience: input.audience,
        tokenAuthMethod: input.token_auth_method ?? 'client_secret_basic',
      };
  }
}

export function toAuthView(auth: ReceiverAuth): z.infer<typeof authViewSchema> {
  switch (auth.type) {
    case 'basic':
      return { type: 'basic', username: auth.username };
    case 'bearer':
      return { type: 'bearer' };
    case 'oauth2_client_credentials':
      return {
        type: auth.type,
        token_url: shownTokenUrl(auth.tokenUrl),
        client_id: auth.clientId,
        ...(auth.scope === undefined ? {} : { scope: auth.scope }),
        ...(auth.audience === undefined ? {} : { audience: auth.audience }),
        token_auth_method: auth.tokenAuthMethod,
      };
  }
}

/** The Authorization header of basic and bearer auth; OAuth2's comes from its token (delivery/outbound/receiver-tokens.ts). */
export function staticAuthorization(auth: ReceiverAuth): string | undefined {
  if (auth.type === 'basic' && auth.password !== undefined)
    return `Basic ${Buffer.from(`${auth.username}:${auth.password}`, 'utf8').toString('base64')}`;
  if (auth.type === 'bearer' && auth.token !== undefined) return `Bearer ${auth.token}`;
  return undefined;
}

/** The Authorization scheme an attempt's request carried, as the delivery log shows it. */
export function authorizationScheme(auth: ReceiverAuth | undefined): 'Basic' | 'Bearer' | undefined {
  if (auth === undefined) return undefined;
  return auth.type === 'basic' ? 'Basic' : 'Bearer';
}

export const clientCertificateInputSchema = z
  .strictObject(
    {
      cert_pem: boundedString('tls_client_certificate.cert_pem', PEM_MAX_CHARS).describe(
        'The client certificate in PEM, optionally followed by its intermediate CA certificates.',
      ),
      key_pem: boundedString('tls_client_certificate.key_pem', PEM_MAX_CHARS).describe(
        'Its private key in PEM (PKCS#8, PKCS#1 or SEC1), unencrypted; sealed at rest, never shown.',
      ),
    },
    {
      error: (issue) =>
        issue.code === 'unrecognized_keys'
          ? `unknown field ${issue.keys.map((k) => `"tls_client_certificate.${k}"`).join(', ')}`
          : 'tls_client_certificate must be an object',
    },
  )
  .meta({
    description:
      'A TLS client certificate for receivers that require mutual TLS (https callback URLs only). A key that does not match ' +
      'the certificate, or a certificate that has expired, answers 400.',
  });

export const clientCertificateViewSchema = z
  .object({
    subject: z.string().describe('The certificate’s subject, e.g. "CN=hookline-client, O=Example".'),
    issuer: z.string().describe('Its issuer.'),
    fingerprint_sha256: z.string().describe('SHA-256 fingerprint of the certificate (colon-separated hex).'),
    not_after: z.string().describe('ISO 8601: when the certificate expires; renew it before then.'),
  })
  .meta({ id: 'ClientCertificate', description: 'The TLS client certificate, described; its key is never shown.' });

/** A client certificate as the engine holds it; `keyPem` is undefined in a process without the key. */
export interface ClientCertificate {
  certPem: string;
  keyPem: string | undefined;
  subject: string;
  issuer: string;
  fingerprint256: string;
  notAfterMs: number;
}

/** `CN=a\nO=b` (Node's X509 form) → `CN=a, O=b`. */
const oneLine = (name: string) => name.split('\n').filter(Boolean).join(', ');

/**
 * A client certificate checked: the first certificate of `cert_pem` is the client's (the rest its
 * chain), the key is an unencrypted private key that matches it, and it has not expired at `nowMs`.
 */
export function checkClientCertificate(
  input: { cert_pem: string; key_pem: string },
  nowMs: number,
): { ok: true; certificate: ClientCertificate } | { ok: false; problem: string } {
  let leaf: X509Certificate;
  try {
    leaf = new X509Certificate(input.cert_pem);
  } catch {
    return { ok: false, problem: 'tls_client_certificate.cert_pem must be a PEM certificate' };
  }
  let key: KeyObject;
  try {
    key = createPrivateKey(input.key_pem);
  } catch {
    return {
      ok: false,
      problem: 'tls_client_certificate.key_pem must be an unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1)',
    };
  }
  if (!leaf.checkPrivateKey(key))
    return { ok: false, problem: 'tls_client_certificate.key_pem does not match the certificate in cert_pem' };
  const notAfterMs = Date.parse(leaf.validTo);
  if (!(notAfterMs > nowMs))
    return { ok: false, problem: `tls_client_certificate.cert_pem expired at ${new Date(notAfterMs).toISOString()}` };
  return {
    ok: true,
    certificate: {
      certPem: input.cert_pem,
      keyPem: input.key_pem,
      subject: oneLine(leaf.subject),
      issuer: oneLine(leaf.issuer),
      fingerprint256: leaf.fingerprint256,
      notAfterMs,
    },
  };
}

export function toClientCertificateView(certificate: ClientCertificate): z.infer<typeof clientCertificateViewSchema> {
  return {
    subject: certificate.subject,
    issuer: certificate.issuer,
    fingerprint_sha256: certificate.fingerprint256,
    not_after: new Date(certificate.notAfterMs).toISOString(),
  };
}

const HEADERS_DESCRIPTION =
  `Up to ${CUSTOM_HEADERS_MAX} request headers sent with every delivery, {"name": "value"}: an API key a receiver's gateway ` +
  'checks, a tenant id. Values are sealed at rest and shown masked (••••) in every read and in the delivery log. Names the ' +
  'engine sends (webhook-*, x-webhook-*, host, content-length, content-type, user-agent, connection headers), and ' +
  'authorization while auth is set, answer 400.';

/** Custom headers at registration: names checked, values printable ASCII. */
export const headersInputSchema = z
  .record(z.string(), z.string({ error: 'every header value must be a string' }), {
    error: 'headers must be an object of header names to values',
  })
  .superRefine((headers, ctx) => {
    const problem = headersProblem(Object.entries(headers));
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  })
  .meta({ description: HEADERS_DESCRIPTION, examples: [{ 'X-Api-Key': 'gateway-key-123' }] });

/** Custom headers in a PATCH: merged into the webhook's (a JSON merge patch): a value sets one, null removes one. */
export const headersPatchSchema = z
  .record(z.string(), z.string({ error: 'every header value must be a string or null' }).nullable(), {
    error: 'headers must be an object of header names to values (or null)',
  })
  .superRefine((headers, ctx) => {
    const problem = headersProblem(
      Object.entries(headers).filter((entry): entry is [string, string] => entry[1] !== null),
    );
    if (problem !== undefined) ctx.addIssue({ code: 'custom', message: problem });
  })
  .meta({
    description:
      'Merged into the webhook’s headers: a value adds or replaces that header (names are case-insensitive), null removes it; ' +
      `the result has at most ${CUSTOM_HEADERS_MAX}. headers null removes them all.`,
  });

/**
 * What a change of `callback_url` from `fromUrl` to `toUrl` would send to a new origin (scheme,
 * host, port) without the request saying so: the stored custom headers whose values it does not
 * give again (nor remove), and `auth` unless it gives a new one or null. Reads never show these
 * values, so whoever moves the URL cannot see what the new host would get: the request must restate
 * them or drop them. The client certificate is not among them: its private key never leaves the
 * engine, and the certificate is what the engine shows every server it connects to. Nothing when
 * the origin stays (a new path or query).
 */
export function credentialsToRestate(
  fromUrl: string,
  toUrl: string,
  stored: { headerNames: readonly string[]; hasAuth: boolean },
  patch: { headers?: Record<string, string | null> | null; auth?: unknown },
): { headers: string[]; auth: boolean } | undefined {
  if (new URL(fromUrl).origin === new URL(toUrl).origin) return undefined;
  const given = new Set(
    patch.headers === undefined || patch.headers === null
      ? []
      : Object.keys(patch.headers).map((name) => name.toLowerCase()),
  );
  const headers = patch.headers === null ? [] : stored.headerNames.filter((name) => !given.has(name.toLowerCase()));
  const auth = stored.hasAuth && patch.auth === undefined;
  return headers.length === 0 && !auth ? undefined : { headers, auth };
}

/** Custom headers as reads show them: each name with its value masked. */
export function maskedHeaders(headers: readonly { name: string }[]): Record<string, string> {
  return Object.fromEntries(headers.map(({ name }) => [name, SECRET_MASK]));
}
