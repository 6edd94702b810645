import { describe, expect, it } from 'vitest';
import { DEFAULT_BREAKER_OPTIONS } from '../../src/delivery/endpoints/breaker.js';
import { EndpointFlow } from '../../src/delivery/endpoints/flow.js';
import { CORROBORATION_MS, HostCeiling } from '../../src/delivery/endpoints/host.js';
import { EndpointRegistry, type Endpoint } from '../../src/delivery/endpoints/registry.js';
import { endpointKey } from '../../src/domain/endpoint.js';

const NOW = 1_764_000_000_000;
const RULES = { options: DEFAULT_BREAKER_OPTIONS, onStateChange: () => undefined };
const SLOTS = 20;
const CONGESTED = { flow: 'congested', retryAfterMs: undefined } as const;
const NEUTRAL = { flow: 'neutral', retryAfterMs: undefined } as const;

/** A flow over a registry with a fixed clock; `ensure` gives vendor `v`'s endpoint on `origin`. */
function world(origin = 'https://shared.example', max?: number) {
  let nowMs = NOW;
  const registry = new EndpointRegistry(RULES, () => nowMs, max);
  const flow = new EndpointFlow(registry, undefined, 'w', () => nowMs, undefined, SLOTS);
  const started = (endpoint: Endpoint) => {
    const admission = flow.tryStart(endpoint, SLOTS);
    return admission.started ? admission.ticket : undefined;
  };
  return {
    registry,
    flow,
    started,
    endpoint: (vendor: string, at = origin) => registry.ensure(endpointKey(vendor, `${at}/hooks/${vendor}`)),
    advance: (ms: number) => (nowMs += ms),
    now: () => nowMs,
  };
}

describe('HostCeiling.corroborate', () => {
  it('passes push-back on only when two vendors’ endpoints, and half of those seen lately, pushed back', () => {
    const host = new HostCeiling('https://h.example');
    expect(host.corroborate('a h', 'congested', NOW)).toBe('neutral');
    expect(host.corroborate('a h', 'congested', NOW + 1)).toBe('neutral');
    expect(host.corroborate('a h', 'ok', NOW + 2)).toBe('ok');
    expect(host.corroborate('b h', 'congested', NOW + 3)).toBe('congested');
    expect(host.corroborate('a h', 'congested', NOW + 4)).toBe('congested');
    // Too long after the other vendor's: one vendor alone again.
    expect(host.corroborate('a h', 'congested', NOW + 4 + CORROBORATION_MS + 1)).toBe('neutral');
    expect(host.corroborate('c h', 'neutral', NOW + 5 + CORROBORATION_MS)).toBe('neutral');
  });

  it('leaves the host alone when a few vendors’ paths push back while most vendors there are answered', () => {
    const host = new HostCeiling('https://saas.example');
    for (let n = 0; n < 10; n += 1) host.corroborate(`v${n} h`, 'ok', NOW + n);
    expect(host.corroborate('v0 h', 'congested', NOW + 20)).toBe('neutral');
    expect(host.corroborate('v1 h', 'congested', NOW + 21)).toBe('neutral');
    expect(host.corroborate('v2 h', 'congested', NOW + 22)).toBe('neutral');
    expect(host.corroborate('v3 h', 'congested', NOW + 23)).toBe('neutral');
    // Half of the ten seen: the host's.
    expect(host.corroborate('v4 h', 'congested', NOW + 24)).toBe('congested');
  });
});

describe('the host’s limit over its vendors’ endpoints', () => {
  it('one vendor’s 429s halve its own limit only: another vendor on the host keeps every slot', () => {
    const w = world();
    const a = w.endpoint('vendor-a');
    const b = w.endpoint('vendor-b');
    expect(a.host).toBe(b.host);
    for (let round = 0; round < 5; round += 1) {
      const tickets = [w.started(a), w.started(a)];
      for (const ticket of tickets) if (ticket !== undefined) w.flow.end(a, ticket, CONGESTED, SLOTS);
      w.advance(100);
    }
    expect(a.limit.view(w.now()).limit).toBe(1);
    expect(a.host.limit.view(w.now()).limit).toBe(SLOTS);
    const bTickets = Array.from({ length: SLOTS }, () => w.started(b));
    expect(bTickets.every((ticket) => ticket !== undefined)).toBe(true);
    expect(w.started(b)).toBeUndefined();
  });

  it('push-back from two vendors brings the host’s limit down, and holds every vendor’s attempts under it together', () => {
    const w = world();
    const vendors = Array.from({ length: 10 }, (_, n) => w.endpoint(`vendor-${n}`));
    // One attempt each in flight at once, all answered 429: the first vendor's push-back alone
    // leaves the host alone; the second one's halves it, once for the attempts that were out together.
    const round = () => {
      const inflight = vendors.map((endpoint) => w.started(endpoint));
      for (const [n, ticket] of inflight.entries())
        if (ticket !== undefined) w.flow.end(vendors[n]!, ticket, CONGESTED, SLOTS);
      w.advance(100);
    };
    round();
    const host = vendors[0]!.host;
    expect(host.limit.view(w.now()).limit).toBe(SLOTS / 2);
    round();
    expect(host.limit.view(w.now()).limit).toBe(SLOTS / 4);
    // Now at most 5 in flight to the host across the ten vendors, though each of them may send one.
    const again = vendors.map((endpoint) => w.started(endpoint)).filter((ticket) => ticket !== undefined);
    expect(again).toHaveLength(SLOTS / 4);
  });

  it('wakes a delivery of another vendor waiting for room at the host when an attempt there ends', async () => {
    const w = world();
    const a = w.endpoint('vendor-a');
    const b = w.endpoint('vendor-b');
    // Bring the host's limit to 1: push-back from both vendors, twice.
    for (let i = 0; i < 5; i += 1) {
      for (const endpoint of [a, b]) {
        const ticket = w.started(endpoint);
        if (ticket !== undefined) w.flow.end(endpoint, ticket, CONGESTED, SLOTS);
      }
      w.advance(10);
    }
    expect(a.host.limit.view(w.now()).limit).toBe(1);
    const held = w.started(a)!;
    expect(held).toBeDefined();
    expect(w.started(b)).toBeUndefined();
    let woken = false;
    const waited = w.flow.waitForRoom(b, 60_000).then(() => (woken = true));
    await Promise.resolve();
    expect(woken).toBe(false);
    w.flow.end(a, held, NEUTRAL, SLOTS);
    await waited;
    expect(woken).toBe(true);
    expect(w.started(b)).toBeDefined();
  });

  it('takes back the host’s ticket with the endpoint’s when an attempt is not sent', () => {
    const w = world();
    const a = w.endpoint('vendor-a');
    const ticket = w.started(a)!;
    expect(a.host.limit.view(w.now()).inflight).toBe(1);
    w.flow.cancel(a, ticket);
    expect(a.host.limit.view(w.now()).inflight).toBe(0);
    expect(a.hostTickets.size).toBe(0);
    expect(w.flow.room(a)).toBe(SLOTS);
  });

  it('a host that never came down holds nothing back: past its slots’ worth attempts go on untracked, and once it comes down an untracked one takes its place before it is sent', () => {
    const w = world();
    const vendors = Array.from({ length: 50 }, (_, n) => w.endpoint(`vendor-${n}`));
    // Fifty attempts at once (as deliveries waiting for a slot hold theirs): none waits for the host.
    const started = vendors.map((endpoint) => w.started(endpoint));
    expect(started.every((ticket) => ticket !== undefined)).toBe(true);
    const host = vendors[0]!.host;
    expect(host.limit.view(w.now()).inflight).toBe(SLOTS);
    expect(host.waiting.size).toBe(0);
    // Two vendors' tracked attempts answer 429: the host comes down to half the slots.
    w.flow.end(vendors[0]!, started[0]!, CONGESTED, SLOTS);
    w.flow.end(vendors[1]!, started[1]!, CONGESTED, SLOTS);
    expect(host.limit.view(w.now()).limit).toBe(SLOTS / 2);
    // An attempt that went on untracked gets its slot now: the host is full (18 tracked still out), so it waits.
    expect(w.flow.holdAtHost(vendors[40]!, started[40]!)).toBe(false);
    expect(host.waiting.has(vendors[40]!)).toBe(true);
    // A tracked attempt holds its place already.
    expect(w.flow.holdAtHost(vendors[5]!, started[5]!)).toBe(true);
  });

  it('keeps hosts apart, and forgets a host with the last of its endpoints', () => {
    const w = world('https://shared.example', 3);
    const a = w.endpoint('vendor-a', 'https://one.example');
    const b = w.endpoint('vendor-b', 'https://two.example');
    const c = w.endpoint('vendor-c', 'https://two.example');
    expect(a.host).not.toBe(b.host);
    expect(c.host).toBe(b.host);
    expect(w.registry.hostCount()).toBe(2);
    // A busy endpoint keeps its host; full, the registry forgets the idle ones, and their hosts with the last.
    expect(w.started(b)).toBeDefined();
    w.endpoint('vendor-d', 'https://three.example');
    expect(w.registry.get(a.key)).toBeUndefined();
    expect(w.registry.get(c.key)).toBeUndefined();
    expect(w.registry.get(b.key)).toBe(b);
    expect(w.registry.hostCount()).toBe(2);
  });
});
