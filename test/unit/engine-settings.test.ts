import { describe, expect, it } from 'vitest';
import { engineEntry, settingsDiffering } from '../../src/cli/engine-checks.js';
import { loadConfig } from '../../src/config/env.js';

const entry = (env: Record<string, string>, pid: number, role: 'all' | 'api' | 'worker' = 'worker') => ({
  ...engineEntry(role, loadConfig(env), undefined),
  pid,
});

describe('settingsDiffering: the settings a starting engine does not share with the running ones', () => {
  it('names each differing variable once, with every value the running engines have and who has it', () => {
    const ours = entry({}, 1);
    const running = [
      entry({ HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true' }, 2),
      entry({ HOOKLINE_ALLOW_PRIVATE_TARGETS: 'true', HOOKLINE_DELIVERY_TIMEOUT: '5s' }, 3, 'all'),
      entry({}, 4),
    ];
    expect(settingsDiffering(ours, running)).toEqual([
      {
        variable: 'HOOKLINE_ALLOW_PRIVATE_TARGETS',
        here: 'false',
        running: [{ value: 'true', engines: ['pid 2 (hookline worker)', 'pid 3 (hookline start)'] }],
      },
      {
        variable: 'HOOKLINE_DELIVERY_TIMEOUT',
        here: '15s',
        running: [{ value: '5s', engines: ['pid 3 (hookline start)'] }],
      },
    ]);
  });

  it('finds nothing among engines with the same settings, whatever their roles and ports', () => {
    expect(
      settingsDiffering(entry({}, 1, 'api'), [
        entry({ HOOKLINE_API_PORT: '9999', HOOKLINE_WORKER_CONCURRENCY: '5' }, 2),
        entry({}, 3, 'all'),
      ]),
    ).toEqual([]);
  });

  it('shows only the origin of the operational webhook URL, never its path or its secret', () => {
    const ours = entry(
      {
        HOOKLINE_OPERATIONAL_WEBHOOK_URL: 'https://ops.example.com/hooks/t0ken',
        HOOKLINE_OPERATIONAL_WEBHOOK_SECRET: `whsec_${Buffer.alloc(24, 1).toString('base64')}`,
      },
      1,
    );
    const [difference] = settingsDiffering(ours, [entry({}, 2)]);
    expect(difference).toEqual({
      variable: 'HOOKLINE_OPERATIONAL_WEBHOOK_URL',
      here: 'https://ops.example.com',
      running: [{ value: 'unset', engines: ['pid 2 (hookline worker)'] }],
    });
    expect(JSON.stringify(ours)).not.toMatch(/t0ken|whsec_/);
  });
});
