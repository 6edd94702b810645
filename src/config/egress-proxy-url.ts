/**
 * HOOKLINE_EGRESS_PROXY: the HTTP proxy every delivery leaves through (delivery/outbound/egress-proxy.ts
 * opens the tunnels). Parsed here so a bad value stops the process at start, with a message that
 * never quotes it: it may hold the proxy's password.
 */

/** Where the egress proxy listens, and the credentials it wants (the shape delivery/outbound/egress-proxy.ts takes). */
export interface EgressProxyAddress {
  host: string;
  port: number;
  /** 'Basic …' when the URL had credentials */
  authorization?: string;
}

const USAGE = 'HOOKLINE_EGRESS_PROXY must be an http:// URL with a host (and port)';

/**
 * Parses `http://[user:pass@]host[:port]` (port 80 by default; credentials percent-decoded into a
 * Basic Proxy-Authorization). Throws on anything else, with a message that never quotes the text:
 * it may hold the proxy's password.
 */
export function parseEgressProxyUrl(text: string): EgressProxyAddress {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    // Node's URL error carries the input (password and all), so it is neither quoted nor chained.
    throw new Error(`${USAGE}; it is not a URL`);
  }
  // WHATWG parsing forgives `http:host` and `http:///host`; a deployment setting should say what it means.
  if (url.protocol !== 'http:' || !/^\s*http:\/\/[^/\\]/i.test(text)) {
    throw new Error(`${USAGE}; the scheme must be http:// (TLS to the receiver runs inside the tunnel)`);
  }
  // A bare `?` or `#` leaves search and hash empty, but shows in href.
  if (url.pathname !== '/' || /[?#]/.test(url.href)) {
    throw new Error(`${USAGE}; it may not have a path, query or fragment`);
  }
  const port = url.port === '' ? 80 : Number(url.port);
  if (port === 0) throw new Error(`${USAGE}; port 0 is not a port to connect to`);
  const host = url.hostname.startsWith('[') ? url.hostname.slice(1, -1) : url.hostname;
  if (url.username === '' && url.password === '') return { host, port };
  return { host, port, authorization: basicCredentials(url.username, url.password) };
}

/** `Basic base64(user:password)` from the URL's percent-encoded userinfo (RFC 7617, UTF-8). */
function basicCredentials(encodedUser: string, encodedPassword: string): string {
  let user: string;
  let password: string;
  try {
    user = decodeURIComponent(encodedUser);
    password = decodeURIComponent(encodedPassword);
  } catch {
    throw new Error(`${USAGE}; its credentials are not validly percent-encoded`);
  }
  // Basic splits at the first colon, so one in the user name would move part of it into the password.
  if (user.includes(':')) throw new Error(`${USAGE}; the user name may not contain ':'`);
  return `Basic ${Buffer.from(`${user}:${password}`, 'utf8').toString('base64')}`;
}
