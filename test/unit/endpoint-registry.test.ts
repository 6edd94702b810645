import { describe, expect, it } from 'vitest';
import { DEFAULT_BREAKER_OPTIONS } from '../../src/delivery/endpoints/breaker.js';
import { EndpointFlow } from '../../src/delivery/endpoints/flow.js';
import { ENDPOINTS_MAX, EndpointRegistry } from '../../src/delivery/endpoints/registry.js';
import { endpointKey } from '../../src/domain/endpoint.js';
import { webhookFixture } from '../helpers/webhook-fixture.js';

const NOW = 1_764_000_000_000;
const RULES = { options: { ...DEFAULT_BREAKER_OPTIONS, failureThreshold: 2 }, onStateChange: () => undefined };

const webhook = (vendorId: string, callbackUrl: string) =>
  webhookFixture({ id: `wh-${vendorId}`, vendorId, callbackUrl });

describe('EndpointRegistry', () => {
  it('keeps one endpoint per vendor and origin, each with its own circuit and limit', () => {
    const registry = new EndpointRegistry(RULES, () => NOW);
    const a = registry.ofWebhook(webhook('vendor-a', 'https://shared.example/a'));
    expect(registry.ofWebhook(webhook('vendor-a', 'https://shared.example/other-path'))).toBe(a);
    expect(a.key).toBe(endpointKey('vendor-a', 'https://shared.example/a'));
    const b = registry.ofWebhook(webhook('vendor-b', 'https://shared.example/a'));
    expect(b).not.toBe(a);
    // Vendor A's failures open A's circuit only.
    for (let i = 0; i < 2; i += 1) a.circuit.finish(a.circuit.start(NOW), 'failed', NOW);
    expect(registry.openEndpoints(NOW)).toEqual([a.key]);
    expect(b.circuit.admit(NOW).admitted).toBe(true);
  });

  it('when full, forgets only endpoints with nothing to remember: a Retry-After pause, an open circuit, an attempt in flight and a waiting delivery survive', () => {
    let nowMs = NOW;
    const registry = new EndpointRegistry(RULES, () => nowMs);
    const flow = new EndpointFlow(registry, undefined, 'w', () => nowMs);
    const paused = registry.ensure('v paused');
    flow.end(
      paused,
      (paused.limit.tryStart(20, nowMs) as { ticket: number }).ticket,
      { flow: 'congested', retryAfterMs: 60_000 },
      20,
    );
    const open = registry.ensure('v open');
    for (let i = 0; i < 2; i += 1) open.circuit.finish(open.circuit.start(nowMs), 'failed', nowMs);
    const busy = registry.ensure('v busy');
    busy.circuit.start(nowMs);
    const waitedOn = registry.ensure('v waited-on');
    waitedOn.deferred = { refs: [], watching: true };
    for (let i = 4; i < ENDPOINTS_MAX; i += 1) {
      const idle = registry.ensure(`v idle-${i}`);
      idle.circuit.finish(idle.circuit.start(nowMs), 'healthy', nowMs);
    }
    nowMs += 1_000;
    const newcomer = registry.ensure('v newcomer');
    expect(registry.get('v idle-4')).toBeUndefined();
    expect(registry.get('v newcomer')).toBe(newcomer);
    for (const kept of [paused, open, busy, waitedOn]) expect(registry.get(kept.key)).toBe(kept);
    // The pause still holds the endpoint back; before, a full flow map forgot it at this point.
    expect(flow.tryStart(paused, 20)).toEqual({ started: false, reason: 'paused', untilMs: NOW + 60_000 });
    expect(registry.openEndpoints(nowMs)).toEqual([open.key]);
  });

  it('gives a webhook the endpoint met afresh once its own was forgotten', () => {
    const registry = new EndpointRegistry(RULES, () => NOW, 2);
    const hook = webhook('vendor-a', 'https://a.example');
    const first = registry.ofWebhook(hook);
    registry.ensure('v x');
    registry.ensure('v y');
    expect(first.evicted).toBe(true);
    const again = registry.ofWebhook(hook);
    expect(again).not.toBe(first);
    expect(registry.get(first.key)).toBe(again);
  });
});
