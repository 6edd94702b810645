/**
 * The portal's one way to call the API: same-origin fetches that send the session cookie and echo
 * the session's CSRF token (held here, in memory only, never in storage or the URL). The first 401
 * ends access for the whole page: every listener hears it once, and no request goes out after it,
 * so polling stops by itself.
 */

/** The API's root: the page is served at `<root>portal/`, so a path prefix in front of it (a proxy's) applies to the API too. */
const ROOT = location.pathname.replace(/portal\/.*$/, '');

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string | undefined,
    message: string,
  ) {
    super(message);
    this.name = 'ApiError';
  }
}

let csrfToken: string | undefined;
let lost = false;
const lostListeners = new Set<() => void>();

/** Sets (or forgets) the CSRF token the session answered; requests echo it in X-CSRF-Token. */
export function setCsrfToken(token: string | undefined): void {
  csrfToken = token;
}

/** Calls `listener` once when a request answers 401 (the session expired or was revoked); answers an unsubscribe. */
export function onAccessLost(listener: () => void): () => void {
  lostListeners.add(listener);
  return () => lostListeners.delete(listener);
}

/** Stops all further requests (after a 401, or a sign-out). */
export function endAccess(): void {
  if (lost) return;
  lost = true;
  for (const listener of lostListeners) listener();
}

interface RequestOptions {
  body?: unknown;
  /** A 401 is the caller's to handle (exchanging a link's token) rather than the end of access. */
  own401?: boolean;
}

/** One API call; answers the parsed JSON body (undefined for 204) or throws ApiError with the API's message. */
export async function call<T>(
  method: 'GET' | 'POST' | 'PATCH' | 'DELETE',
  path: string,
  options: RequestOptions = {},
): Promise<T> {
  if (lost) throw new ApiError(401, 'unauthorized', 'Access ended');
  const headers: Record<string, string> = { accept: 'application/json' };
  if (csrfToken !== undefined) headers['x-csrf-token'] = csrfToken;
  // Only with a body: the API refuses an empty body declared as JSON.
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  let response: Response;
  try {
    response = await fetch(ROOT + path.replace(/^\//, ''), {
      method,
      credentials: 'same-origin',
      headers,
      cache: 'no-store',
      ...(options.body === undefined ? {} : { body: JSON.stringify(options.body) }),
    });
  } catch {
    throw new ApiError(0, undefined, 'The portal cannot reach the server. Check your connection and try again.');
  }
  if (response.status === 401 && !options.own401) {
    endAccess();
    throw new ApiError(401, 'unauthorized', 'Access ended');
  }
  if (response.status === 204) return undefined as T;
  const json = (await response.json().catch(() => undefined)) as unknown;
  if (!response.ok) {
    const body = (typeof json === 'object' && json !== null ? json : {}) as { error?: unknown; code?: unknown };
    const message = typeof body.error === 'string' ? body.error : `The server answered ${response.status}.`;
    throw new ApiError(response.status, typeof body.code === 'string' ? body.code : undefined, message);
  }
  return json as T;
}

/** A path segment from an id the API gave. */
export const seg = (id: string) => encodeURIComponent(id);

/** `?a=1&b=2` from the defined entries, or the empty string. */
export function query(params: Record<string, string | undefined>): string {
  const search = new URLSearchParams();
  for (const [name, value] of Object.entries(params)) if (value !== undefined && value !== '') search.set(name, value);
  const text = search.toString();
  return text === '' ? '' : `?${text}`;
}
