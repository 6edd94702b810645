import type { Browser } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DOCS_CSP } from '../../src/admin/security-headers.js';
import { testApp, type TestApp } from '../helpers/app.js';
import { chromiumMissing, launchChromium } from '../helpers/browser.js';

const skip = chromiumMissing();
if (skip) console.warn(skip);

describe.skipIf(skip !== undefined)('the API docs (/docs) in Chromium, under their Content-Security-Policy', () => {
  let t: TestApp;
  let browser: Browser;
  let baseUrl: string;
  beforeAll(async () => {
    t = await testApp();
    baseUrl = await t.app.listen({ host: '127.0.0.1', port: 0 });
    browser = await launchChromium();
  });
  afterAll(async () => {
    await browser?.close();
    await t?.close();
  });

  it('renders every operation with no script error, no CSP refusal and no request to another origin', async () => {
    const context = await browser.newContext();
    try {
      const page = await context.newPage();
      const problems: string[] = [];
      page.on('console', (message) => {
        if (message.type() === 'error') problems.push(`console: ${message.text()}`);
      });
      page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
      page.on('request', (request) => {
        if (!request.url().startsWith(`${baseUrl}/`) && !request.url().startsWith('data:'))
          problems.push(`request to another origin: ${request.url()}`);
      });
      const answer = await page.goto(`${baseUrl}/docs/`);
      expect(answer?.headers()['content-security-policy']).toBe(DOCS_CSP);
      // Swagger UI draws an operation block per route once its scripts ran and fetched the document.
      await page.locator('.opblock').first().waitFor({ timeout: 15_000 });
      expect(await page.locator('.opblock').count()).toBeGreaterThan(30);
      await page.getByText('/vendors/v1/webhooks', { exact: true }).first().click();
      await page.locator('.opblock-body').first().waitFor({ timeout: 15_000 });
      expect(problems).toEqual([]);
    } finally {
      await context.close();
    }
  });
});
