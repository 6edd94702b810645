/**
 * Text that came back from a request made with a webhook's credentials, with those credentials
 * taken out. A token endpoint's refusal is kept in the delivery log (in Redis), shown to the vendor
 * (read-only portal sessions too), put on the attempt's span and exported: an endpoint that echoes
 * what it was sent ("invalid client 'hookline:s3cret'", a debugging proxy that quotes the request)
 * would otherwise publish the client secret there. The engine knows every secret the webhook holds
 * and the forms they travel in, so it replaces each occurrence with the mask, and then caps the
 * text: a secret is never half-cut by the cap before it could be recognised.
 */
import { SECRET_MASK, type ReceiverAuth } from './receiver-auth.js';

/**
 * Shorter secrets are not looked for: they would match ordinary words of a message ("1", "eu") and
 * mangle it, and a secret that short is no secret to an attacker anyway.
 */
const SECRET_MIN_CHARS = 4;

/** `application/x-www-form-urlencoded` of one value (RFC 6749 §2.3.1 encodes client credentials so before Basic). */
export const formEncode = (value: string) => new URLSearchParams({ v: value }).toString().slice(2);

const base64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

/** Each secret as it is, URL- and form-encoded, and in base64. */
function encodings(secret: string): string[] {
  return [secret, encodeURIComponent(secret), formEncode(secret), base64(secret)];
}

/**
 * The secrets a webhook holds (its auth's password, token or client secret; its custom header
 * values), in every form a request carries them: as they are, URL- or form-encoded (a form body), in
 * base64 (alone, and as the `user:password` of a Basic header, with the client form-encoded first
 * as OAuth2's client_secret_basic sends it). Secrets absent in this process (no key) add nothing.
 */
export function credentialForms(
  auth: ReceiverAuth | undefined,
  headers: readonly { value: string | undefined }[],
): string[] {
  const forms: string[] = [];
  for (const { value } of headers) if (value !== undefined) forms.push(...encodings(value));
  if (auth?.type === 'basic' && auth.password !== undefined) {
    forms.push(...encodings(auth.password), base64(`${auth.username}:${auth.password}`));
  } else if (auth?.type === 'bearer' && auth.token !== undefined) {
    forms.push(...encodings(auth.token));
  } else if (auth?.type === 'oauth2_client_credentials' && auth.clientSecret !== undefined) {
    const secret = auth.clientSecret;
    forms.push(
      ...encodings(secret),
      base64(`${formEncode(auth.clientId)}:${formEncode(secret)}`),
      base64(`${auth.clientId}:${secret}`),
    );
  }
  return forms;
}

/**
 * `text` with every occurrence of `forms` replaced by the mask (longest first, so a form that holds
 * another goes whole), then cut to `maxChars` with an ellipsis.
 */
export function redactCredentials(text: string, forms: readonly string[], maxChars: number): string {
  let redacted = text;
  const longestFirst = [...new Set(forms)].filter((form) => form.length >= SECRET_MIN_CHARS);
  longestFirst.sort((a, b) => b.length - a.length);
  for (const form of longestFirst) redacted = redacted.split(form).join(SECRET_MASK);
  return redacted.length > maxChars ? `${redacted.slice(0, maxChars - 1)}…` : redacted;
}
