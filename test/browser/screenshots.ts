import { mkdirSync } from 'node:fs';
import path from 'node:path';
import type { Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chromiumMissing, launchChromium } from '../helpers/browser.js';
import { portalWorld, VENDOR, type PortalWorld } from './fixture.js';

/**
 * `npm run docs:screenshots`: the pictures of the portal in docs/portal.md (docs/portal/*.png), taken from a
 * real engine with real deliveries. A project of its own, outside `npm test`: it rewrites files
 * the repository tracks.
 */

const OUT_DIR = path.resolve(import.meta.dirname, '../../docs/portal');
const skip = chromiumMissing();

describe.skipIf(skip !== undefined)('portal screenshots', () => {
  let w: PortalWorld;
  beforeAll(async () => {
    w = await portalWorld();
    // One webhook with delivery controls set, so the pictures show them.
    const patched = await w.t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${w.webhooks.machineCreated}`,
      headers: { 'x-api-key': w.vendorKey },
      payload: {
        rate_limit_per_second: 50,
        signature: 'ed25519',
        include_fields: ['data.status', 'data.hardware_specs'],
      },
    });
    expect(patched.statusCode).toBe(200);
    await w.ingest('EVENT_TYPE_MACHINE_CREATED', 6);
    // A receiver having a bad moment: a plausible error body rather than the tests' hostile one.
    w.bad.script('/deployments', { status: 200 });
    await w.ingest('EVENT_TYPE_DEPLOYMENT_STOPPED', 2);
    w.bad.script('/deployments', {
      status: 503,
      headers: { 'content-type': 'application/json' },
      body: '{"error":"database connection pool exhausted"}',
    });
    await w.ingest('EVENT_TYPE_DEPLOYMENT_STOPPED', 3);
  });
  afterAll(async () => w?.close());

  async function shoot(page: Page, name: string, fullPage = true): Promise<void> {
    // Nothing still loading: every "Loading …" line has been replaced.
    await expect.poll(() => page.getByText(/^Loading /).count()).toBe(0);
    await page.screenshot({ path: path.join(OUT_DIR, `${name}.png`), fullPage });
  }

  it('saves each page', async () => {
    mkdirSync(OUT_DIR, { recursive: true });
    const res = await fetch(`${w.baseUrl}/admin/v1/portal/sessions`, {
      method: 'POST',
      headers: { 'x-api-key': w.adminKey, 'content-type': 'application/json' },
      body: JSON.stringify({ vendor_id: VENDOR, permission: 'manage', ttl: '24h' }),
    });
    const { url } = (await res.json()) as { url: string };
    const browser = await launchChromium();
    try {
      const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
      context.setDefaultTimeout(15_000);
      const page = await context.newPage();
      await page.goto(url);
      await page.getByRole('heading', { name: 'Machine created' }).waitFor();
      await shoot(page, 'endpoints');

      const dead = await w.t.app.inject({
        method: 'GET',
        url: `/vendors/v1/webhooks/${w.webhooks.deploymentStopped}/dead-letters?limit=1`,
        headers: { 'x-api-key': w.vendorKey },
      });
      const failed = dead.json<{ dead_letters: { delivery_id: string }[] }>().dead_letters[0]!.delivery_id;
      await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}/${failed}`);
      await page.getByText(/^Request headers sent/).click();
      await shoot(page, 'delivery-log');

      await page.goto(`${w.baseUrl}/portal/#/catalogue`);
      await page.getByRole('heading', { name: 'Verify a signature' }).waitFor();
      await shoot(page, 'catalogue', false);

      // A short page: a short window, so the picture is not mostly background.
      await page.setViewportSize({ width: 1280, height: 560 });
      await page.goto(`${w.baseUrl}/portal/#/notices`);
      await page.getByRole('button', { name: 'Re-enable and replay dead letters' }).waitFor();
      await shoot(page, 'notices', false);

      await page.setViewportSize({ width: 375, height: 800 });
      await page.goto(`${w.baseUrl}/portal/#/endpoints`);
      await page.getByRole('heading', { name: 'Machine created' }).waitFor();
      expect(await page.evaluate<number>('document.scrollingElement.scrollWidth')).toBeLessThanOrEqual(375);
      await shoot(page, 'endpoints-375', false);
    } finally {
      await browser.close();
    }
  });
});
