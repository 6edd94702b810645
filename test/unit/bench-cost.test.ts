import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import {
  attribute,
  costPerDelivery,
  costTableRows,
  PARTS,
  sourceOf,
  type PartId,
  type Profile,
} from '../../bench/cpu-profile.js';
import { targetCheck, targetsTable } from '../../bench/targets.js';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

/** A profile of one stack per entry (root first), each sampled for `us`. */
function profileOf(stacks: { frames: [functionName: string, url: string][]; us: number }[]): Profile {
  const profile: Profile = {
    nodes: [{ id: 1, callFrame: { functionName: '(root)', url: '', lineNumber: -1 }, children: [] }],
    samples: [],
    timeDeltas: [],
  };
  for (const { frames, us } of stacks) {
    let parent = profile.nodes[0]!;
    for (const [functionName, url] of frames) {
      const node = {
        id: profile.nodes.length + 1,
        callFrame: { functionName, url, lineNumber: 0 },
        children: [] as number[],
      };
      profile.nodes.push(node);
      parent.children!.push(node.id);
      parent = node;
    }
    profile.samples.push(parent.id);
    profile.timeDeltas.push(us);
  }
  return profile;
}

const own = (file: string) => `file://${ROOT}/${file}`;
const lib = (file: string) => `file://${ROOT}/node_modules/${file}`;

describe('bench cost attribution', () => {
  it('reads a frame’s source from this checkout, another checkout and the built output', () => {
    expect(sourceOf(own('src/delivery/outbound/http-sender.ts'))).toBe('src/delivery/outbound/http-sender.ts');
    expect(sourceOf('file:///elsewhere/hookline/dist/src/store/delivery-log.js')).toBe('src/store/delivery-log.ts');
    expect(sourceOf(lib('ioredis/built/Redis.js'))).toBe('node_modules/ioredis/built/Redis.js');
    expect(sourceOf('node:internal/timers')).toBe('node:internal/timers');
    expect(sourceOf('')).toBe('');
  });

  it('gives a sample to the nearest frame that names a part, else to a library’s fallback, and leaves idle out', () => {
    const { busyUs, parts } = attribute(
      profileOf([
        // ioredis under the delivery log's flush is the record's time, not the Redis client's.
        {
          frames: [
            ['processJob', own('src/delivery/processor.ts')],
            ['recordAttempt', own('src/delivery/record.ts')],
            ['sendCommand', lib('ioredis/built/Redis.js')],
          ],
          us: 100,
        },
        {
          frames: [
            ['logAttempt', own('src/delivery/processor.ts')],
            ['write', lib('pino/lib/proto.js')],
          ],
          us: 40,
        },
        {
          frames: [
            ['processJob', own('src/delivery/processor.ts')],
            ['inc', lib('prom-client/lib/counter.js')],
          ],
          us: 30,
        },
        { frames: [['onData', lib('undici/lib/dispatcher/client-h1.js')]], us: 20 },
        {
          frames: [
            ['processTicksAndRejections', 'node:internal/process/task_queues'],
            ['returnReply', lib('ioredis/built/DataHandler.js')],
          ],
          us: 15,
        },
        { frames: [['(garbage collector)', '']], us: 10 },
        { frames: [['signatureOf', own('bench/lean.ts')]], us: 5 },
        { frames: [['(idle)', '']], us: 1_000 },
      ]),
    );
    expect(busyUs).toBe(220);
    expect(Object.fromEntries(parts)).toEqual({
      record: 100,
      logs: 40,
      metrics: 30,
      send: 20,
      redis: 15,
      gc: 10,
      sign: 5,
    });
  });

  it('turns a profile into µs per delivery that add up to the measured total', () => {
    const profile = profileOf([
      { frames: [['recordAttempt', own('src/delivery/record.ts')]], us: 300 },
      { frames: [['admit', own('src/delivery/attempt.ts')]], us: 100 },
    ]);
    // Main thread 800 µs of CPU for 400 µs of busy samples; 200 µs on other threads; 10 deliveries.
    const cost = costPerDelivery({ profile, processUs: 1_000, mainThreadUs: 800 }, 10);
    expect(cost).toMatchObject({ record: 60, admission: 20, threads: 20, ingest: 0 });
    const scaled = costPerDelivery({ profile, processUs: 1_000, mainThreadUs: 800 }, 10, 50);
    expect(scaled).toMatchObject({ record: 30, admission: 10, threads: 10 });

    const zero = Object.fromEntries(PARTS.map(({ id }) => [id, 0])) as Record<PartId, number>;
    const rows = costTableRows(scaled, { ...zero, record: 12 }, { processUs: 40 }, { hookline: 9, lean: 3, naive: 20 });
    expect(rows).toContain('| record (delivery log writes) | 30 | 12 | +18 |  |');
    expect(rows).toContain('| **process, total** | 50 | 12 | +38 | 40 |');
    expect(rows).toContain('| Redis server | 9 | 3 | +6 | 20 |');
  });
});

describe('bench targets block', () => {
  it('lists every target of the round, met, missed, not run or failed', () => {
    const rows = targetsTable([
      {
        scenario: 'e2e',
        checks: [
          targetCheck('e2e-over-naive', '1.62', true),
          targetCheck('e2e-floor', '1.62', true),
          targetCheck('cpu-over-lean', '2.10', false),
        ],
        error: undefined,
      },
      { scenario: 'latency', checks: undefined, error: 'the receiver went away' },
    ]);
    expect(rows).toHaveLength(2 + 10);
    expect(rows).toContain('| e2e `hookline start` ÷ naive BullMQ worker ≥ 1.50 | 1.62 | met |');
    expect(rows).toContain('| Hookline CPU per delivery ≤ 1.5 × the lean pipeline’s | 2.10 | **missed** |');
    expect(rows).toContain(
      '| latency accepted → received at half the measured maximum: p99 ≤ 30 ms | latency: error | not judged |',
    );
    expect(rows).toContain('| ingest ÷ raw addBulk ≥ 1.00 | (ingest not run) | not judged |');
  });

  it('prints usage for --help instead of running the bench', () => {
    const run = spawnSync(process.execPath, ['--import', 'tsx', 'bench/run.ts', '--help'], {
      cwd: ROOT,
      encoding: 'utf8',
      timeout: 20_000,
    });
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/^usage: npm run bench/);
    expect(run.stdout).toContain('--smoke');
    // A process loading the bench through tsx: seconds on a busy machine, past vitest's 5 s default.
  }, 30_000);
});
