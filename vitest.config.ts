import { defineConfig } from 'vitest/config';

export default defineConfig({
  // The client packages (@hookline/*) from their sources, as tsconfig.json maps them, not their build.
  resolve: { tsconfigPaths: true },
  test: {
    reporters: ['default', './test/helpers/summary-reporter.ts'],
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
          globalSetup: ['test/helpers/global-setup.ts'],
          testTimeout: 30_000,
          hookTimeout: 60_000,
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
