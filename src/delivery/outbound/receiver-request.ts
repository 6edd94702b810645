import { credentialForms, redactCredentials } from '../../domain/credential-redaction.js';
import { authorizationScheme, staticAuthorization } from '../../domain/receiver-auth.js';
import type { SentRequest } from '../../domain/delivery.js';
import type { Webhook } from '../../domain/webhook.js';
import type { SendRequest, SendResult } from './http-sender.js';
import type { ReceiverTokens } from './receiver-tokens.js';

/**
 * What a webhook's receiver credentials add to an attempt's request: its custom headers, the
 * Authorization of basic or bearer auth, the client certificate; an OAuth2 token is added by
 * `sendAuthorized`, which fetches it. Mutates `headers` (the request is the attempt's own).
 */
export function addReceiverCredentials(request: SendRequest, webhook: Webhook): SendRequest {
  for (const { name, value } of webhook.headers) if (value !== undefined) request.headers[name] = value;
  const authorization = webhook.auth === undefined ? undefined : staticAuthorization(webhook.auth);
  if (authorization !== undefined) request.headers.authorization = authorization;
  const certificate = webhook.clientCertificate;
  if (certificate?.keyPem !== undefined) {
    request.clientCertificate = {
      fingerprint: certificate.fingerprint256,
      certPem: certificate.certPem,
      keyPem: certificate.keyPem,
    };
  }
  return request;
}

/**
 * What the attempt record keeps of them, to show the request's headers masked: the names and the
 * scheme, no value, of those `request` really carried as it was sent (an OAuth2 token that never
 * came, a secret this process cannot open, adds no header, so none is shown).
 */
export function receiverCredentialFacts(
  webhook: Webhook,
  request: SendRequest,
): Pick<SentRequest, 'headerNames' | 'authScheme'> {
  const headerNames = webhook.headers.map(({ name }) => name).filter((name) => request.headers[name] !== undefined);
  const scheme = request.headers.authorization === undefined ? undefined : authorizationScheme(webhook.auth);
  return {
    ...(headerNames.length === 0 ? {} : { headerNames }),
    ...(scheme === undefined ? {} : { authScheme: scheme }),
  };
}

/** A token request's failure kept in the attempt at most (the endpoint's URL and its error text). */
const TOKEN_ERROR_MAX_CHARS = 300;

/**
 * Sends an attempt, first getting the webhook's OAuth2 token when it has one: no token is an `auth`
 * failure, unsent. A 401 to a token kept from before gets one more try with a new token; a 401 to a
 * token fetched for this request is the receiver's answer.
 */
export async function sendAuthorized(
  sender: { send(request: SendRequest): Promise<SendResult> },
  tokens: ReceiverTokens | undefined,
  webhook: Webhook,
  request: SendRequest,
): Promise<SendResult> {
  const auth = webhook.auth;
  if (auth?.type !== 'oauth2_client_credentials' || tokens === undefined) return sender.send(request);
  let token = await tokens.get(auth);
  if (!token.ok) return noToken(webhook, token);
  request.headers.authorization = `Bearer ${token.token}`;
  const result = await sender.send(request);
  if (result.kind !== 'response' || result.status !== 401 || token.fresh) return result;
  token = await tokens.refresh(auth, token);
  if (!token.ok) return noToken(webhook, token);
  request.headers.authorization = `Bearer ${token.token}`;
  return sender.send(request);
}

/**
 * The `auth` failure of an attempt that got no token. Its message is the one value the delivery
 * log (in Redis, shown to vendors) and the attempt's span both read, so the endpoint's text is redacted of every secret
 * the webhook holds (an endpoint that echoes its request would quote the client secret) and capped
 * here, once.
 */
function noToken(webhook: Webhook, failure: { message: string; durationMs: number }): SendResult {
  const message = redactCredentials(
    failure.message,
    credentialForms(webhook.auth, webhook.headers),
    TOKEN_ERROR_MAX_CHARS,
  );
  return { kind: 'error', errorClass: 'auth', message, durationMs: failure.durationMs };
}
