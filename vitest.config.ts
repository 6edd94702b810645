import { availableParallelism } from 'node:os';
import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Integration files whose assertions are measurements of this machine: a latency or a throughput
 * bound (a Redis PING p50, one client's requests per second, an attempt ended within its deadline
 * plus 500 ms, a lag under load, a child process that exits within seconds). They run one at a
 * time after every other file (the `integration-timed` project), with nothing else of the suite
 * beside them, as the whole suite once ran; everything else runs on parallel workers.
 */
const TIMED = [
  'test/integration/cluster.test.ts',
  'test/integration/connections.test.ts',
  'test/integration/delivery-batch.test.ts',
  'test/integration/delivery-concurrency.test.ts',
  'test/integration/delivery-first-contact.test.ts',
  'test/integration/delivery-priority.test.ts',
  'test/integration/delivery-rate-limit.test.ts',
  'test/integration/http-sender.test.ts',
  'test/integration/ingest-rate-limit.test.ts',
  'test/integration/read-model-projection.test.ts',
  'test/integration/replay-isolation.test.ts',
];

/**
 * Test files at once. The integration, browser and fault tests spend most of their time waiting on
 * real servers, receivers and child processes, not computing: vitest's default (one fewer than the
 * cores) would run a single file at a time on 2 cores and leave the second one mostly idle.
 */
const WORKERS = Number(process.env.XW ?? 0) || Math.max(2, availableParallelism() - 1);

export default defineConfig({
  // The client packages (@hookline/*) from their sources, as tsconfig.json maps them, not their build.
  resolve: { tsconfigPaths: true },
  test: {
    reporters: ['default', './test/helpers/summary-reporter.ts'],
    maxWorkers: WORKERS,
    projects: [
      {
        extends: true,
        test: {
          name: 'unit',
          include: ['test/unit/**/*.test.ts'],
        },
      },
      {
        extends: true,
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          exclude: [...configDefaults.exclude, ...TIMED],
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
        },
      },
      {
        // The integration files of TIMED, one at a time once the parallel ones are done.
        extends: true,
        test: {
          name: 'integration-timed',
          include: TIMED,
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
          maxWorkers: 1,
          sequence: { groupOrder: 1 },
        },
      },
      {
        // The vendor portal in a real Chromium (playwright-core, the system's /usr/bin/chromium)
        // against a listening API, a worker and receivers on 127.0.0.1.
        extends: true,
        test: {
          name: 'browser',
          include: ['test/browser/**/*.test.ts'],
          globalSetup: ['test/helpers/global-setup.ts', 'test/helpers/portal-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        // The README's pictures of the portal (docs/portal/*.png): `npm run docs:screenshots`.
        extends: true,
        test: {
          name: 'screenshots',
          include: ['test/browser/screenshots.ts'],
          globalSetup: ['test/helpers/global-setup.ts', 'test/helpers/portal-setup.ts'],
          testTimeout: 120_000,
          hookTimeout: 60_000,
        },
      },
      {
        // Redocly CLI and Spectral on the served OpenAPI document: `npm run lint:openapi`, also run by
        // CI. A project of its own: the linters are CPU-heavy, and beside the timing-sensitive
        // integration tests on a 2-core machine they would slow those.
        extends: true,
        test: {
          name: 'openapi-lint',
          include: ['test/lint/**/*.test.ts'],
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 90_000,
          hookTimeout: 60_000,
        },
      },
      {
        // Real processes, outages and long waits by design: `npm run test:faults`, also run by CI.
        extends: true,
        test: {
          name: 'faults',
          include: ['test/faults/**/*.test.ts'],
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
    ],
  },
});
