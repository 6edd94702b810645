/**
 * Where a vendor portal link points. A link carries a one-time token that opens a vendor's
 * session, so its address is never taken from a request (whoever sent the request would choose
 * where the vendor's browser takes the token): it is HOOKLINE_PUBLIC_URL, else the API's own
 * address when it listens on loopback (only a browser on this machine opens such a link, and the
 * token crosses no network in clear), else there is none and the setting is required. A plain-http
 * HOOKLINE_PUBLIC_URL counts only on loopback: the session cookie is Secure (`__Host-`), which
 * browsers keep over https and on loopback only, so a link elsewhere would open no session (and
 * carry its token in clear). The API's link route and `hookline portal link` both follow this rule.
 */
import { blockedAddressReason } from './ip-policy.js';

/** An address the API listens on. */
export interface ListenAddress {
  host: string;
  port: number;
}

/** The base URL links start with; undefined when HOOKLINE_PUBLIC_URL must be set first, or be https. */
export function portalLinkBase(
  publicUrl: string | undefined,
  listening: ListenAddress | undefined,
): string | undefined {
  if (publicUrl !== undefined) {
    const url = new URL(publicUrl);
    return url.protocol === 'https:' || isLoopback(url.hostname.replace(/^\[|\]$/g, '')) ? publicUrl : undefined;
  }
  if (listening === undefined) return undefined;
  const { host, port } = listening;
  if (!isLoopback(host)) return undefined;
  return `http://${host.includes(':') ? `[${host}]` : host}:${port}`;
}

/** `localhost` or a loopback address: where browsers keep a Secure cookie over plain http. */
function isLoopback(host: string): boolean {
  return host === 'localhost' || blockedAddressReason(host)?.startsWith('loopback') === true;
}

/** The link a session's token opens: the token in the fragment, which browsers never send to a server. */
export function portalLink(baseUrl: string, token: string): string {
  return `${baseUrl.replace(/\/+$/, '')}/portal/#token=${token}`;
}
