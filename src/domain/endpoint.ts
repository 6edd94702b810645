/**
 * A receiver endpoint, as delivery tracks its health: one vendor's callback URL origin (scheme,
 * host, port). The breaker and its circuit, first contact and the shared memory of endpoints that
 * answered, the adaptive concurrency limit, Retry-After pauses, the wakeups of deliveries deferred
 * behind it, and the circuit and flow the stats and operator views show are all kept per endpoint.
 *
 * Why the vendor is part of it: receivers are shared. A SaaS receiver host, or the platform's own
 * multi-tenant ingestion host, serves many vendors on one origin; keyed by origin alone, one
 * vendor's failing path would open the circuit that holds back every other vendor's deliveries
 * there, and one tenant's 429 would pause them all. Within one vendor the origin stays one thing:
 * its failing path may hold back its own other webhooks on that host, as a host that is down would.
 *
 * This is the one place the key is built; everything keyed by endpoint takes it from here.
 */

/** The endpoint key of a vendor's callback URL: `<vendor id> <origin>` (vendor ids hold no space). */
export function endpointKey(vendorId: string, callbackUrl: string): string {
  return `${vendorId} ${originOf(callbackUrl)}`;
}

/** The vendor and the receiver origin an endpoint key names (for log lines and operator views). */
export function endpointParts(endpoint: string): { vendorId: string; origin: string } {
  const at = endpoint.indexOf(' ');
  return { vendorId: endpoint.slice(0, at), origin: endpoint.slice(at + 1) };
}

function originOf(callbackUrl: string): string {
  try {
    return new URL(callbackUrl).origin;
  } catch {
    // Never stored (registration checks URLs); the sender reports such a URL as a network error.
    return callbackUrl;
  }
}
