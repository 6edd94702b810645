import { describe, expect, it } from 'vitest';
import { capturedLogs } from '../helpers/logs.js';
import { egressProxyObserver } from '../../src/engine/observers.js';

describe('the worker’s line about an unreachable egress proxy', () => {
  it('is one warn line per 10 s with the address, counting the attempts that met it since the last', () => {
    const logs = capturedLogs();
    let nowMs = 1_000_000;
    const told = egressProxyObserver(logs.logger(), () => nowMs);
    const failure = { proxy: '10.0.0.5:3128', reason: 'connect ECONNREFUSED 10.0.0.5:3128' };
    told(failure);
    nowMs += 9_999;
    told(failure);
    told(failure);
    nowMs += 1;
    told(failure);
    expect(
      logs.lines.map(({ level, event, proxy, err, attempts }) => ({ level, event, proxy, err, attempts })),
    ).toEqual([
      { level: 40, event: 'delivery.egress_proxy_unreachable', proxy: failure.proxy, err: failure.reason, attempts: 1 },
      { level: 40, event: 'delivery.egress_proxy_unreachable', proxy: failure.proxy, err: failure.reason, attempts: 3 },
    ]);
  });
});
