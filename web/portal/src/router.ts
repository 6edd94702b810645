import { useEffect, useMemo, useState } from 'preact/hooks';

/**
 * The page's place, from the address's fragment: `#/endpoints`, `#/deliveries/<webhook>/<delivery>`,
 * `#/events/<webhook>`, `#/catalogue`, `#/notices`.
 */
export type Route =
  | { page: 'endpoints' }
  | { page: 'deliveries'; webhookId: string | undefined; deliveryId: string | undefined }
  | { page: 'events'; webhookId: string | undefined }
  | { page: 'catalogue' }
  | { page: 'notices' };

function parseRoute(hash: string): Route {
  const [page, first, second] = hash.replace(/^#\/?/, '').split('/').map(decodeSegment);
  switch (page) {
    case 'deliveries':
      return { page, webhookId: first || undefined, deliveryId: second || undefined };
    case 'events':
      return { page, webhookId: first || undefined };
    case 'catalogue':
    case 'notices':
      return { page };
    default:
      return { page: 'endpoints' };
  }
}

function decodeSegment(text: string): string {
  try {
    return decodeURIComponent(text);
  } catch {
    return '';
  }
}

/** Links to each place. */
export const href = {
  endpoints: '#/endpoints',
  catalogue: '#/catalogue',
  notices: '#/notices',
  deliveries: (webhookId?: string, deliveryId?: string) =>
    `#/deliveries${webhookId === undefined ? '' : `/${encodeURIComponent(webhookId)}`}${deliveryId === undefined ? '' : `/${encodeURIComponent(deliveryId)}`}`,
  events: (webhookId?: string) => `#/events${webhookId === undefined ? '' : `/${encodeURIComponent(webhookId)}`}`,
};

/** The current route, following the fragment as links and the back button change it. */
export function useRoute(): Route {
  const [hash, setHash] = useState(() => location.hash);
  useEffect(() => {
    const follow = () => setHash(location.hash);
    addEventListener('hashchange', follow);
    // A change between the first render and this effect fired no listener of ours: read it now.
    follow();
    return () => removeEventListener('hashchange', follow);
  }, []);
  return useMemo(() => parseRoute(hash), [hash]);
}
