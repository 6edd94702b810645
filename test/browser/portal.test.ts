import type { Browser, BrowserContext, Locator, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, inject, it } from 'vitest';
import { chromiumMissing, launchChromium } from '../helpers/browser.js';
import { issueClientCertificate } from '../helpers/test-ca.js';
import { deliveryLogCaughtUp, waitFor } from '../helpers/wait.js';
import { HOSTILE_BODY, portalWorld, SECRET, VENDOR, type PortalWorld } from './fixture.js';

const testCa = inject('testCa');

const skip = chromiumMissing();
if (skip) console.warn(skip);

type Permission = 'read' | 'replay' | 'manage';

/**
 * Moves a page to another of its routes by the address. After a session ends, the page's own polling
 * may meet the 401 first and take the navigation away, so a tab may be gone before a click lands;
 * either way the next call answers 401.
 */
const goTo = (page: Page, hash: string) => page.evaluate(`location.hash = ${JSON.stringify(hash)}`);

const EXPIRED_TEXT = 'This portal link has expired or was revoked. Ask for a new link.';
const LINK_INVALID_TEXT = 'This portal link is invalid, was already used, has expired or was revoked.';
const CIRCUIT_OPEN_TEXT = 'Open: the endpoint keeps failing, deliveries wait';

/** A page of the portal, with what would betray a problem: script errors, dialogs, CSP refusals, requests to other origins. */
interface Portal {
  page: Page;
  context: BrowserContext;
  problems: string[];
}

describe.skipIf(skip !== undefined)('the vendor portal in Chromium (real API, worker, receivers)', () => {
  let w: PortalWorld;
  let browser: Browser;
  const contexts: BrowserContext[] = [];

  beforeAll(async () => {
    w = await portalWorld();
    await w.ingest('EVENT_TYPE_MACHINE_CREATED', 3);
    browser = await launchChromium();
  });
  afterAll(async () => {
    for (const context of contexts) await context.close();
    await browser?.close();
    await w?.close();
  });

  /** Mints a link as the platform's backend would: POST /admin/v1/portal/sessions over HTTP. */
  async function mint(permission: Permission, ttl = '1h'): Promise<{ session_id: string; url: string }> {
    const res = await fetch(`${w.baseUrl}/admin/v1/portal/sessions`, {
      method: 'POST',
      headers: { 'x-api-key': w.adminKey, 'content-type': 'application/json' },
      body: JSON.stringify({ vendor_id: VENDOR, permission, ttl }),
    });
    expect(res.status).toBe(201);
    const link = (await res.json()) as { session_id: string; url: string };
    expect(link.url).toMatch(new RegExp(`^${w.baseUrl}/portal/#token=`));
    return link;
  }

  /**
   * Opens `url` in a fresh browser (no cookies), watching for problems; `clock`: the page's clock is
   * Playwright's, to move on at will; `timezoneId`: the browser's time zone (else the machine's).
   */
  async function open(
    url: string,
    viewport = { width: 1280, height: 900 },
    options: { clock?: boolean; timezoneId?: string } = {},
  ): Promise<Portal> {
    const context = await browser.newContext({
      viewport,
      ...(options.timezoneId === undefined ? {} : { timezoneId: options.timezoneId }),
    });
    contexts.push(context);
    context.setDefaultTimeout(15_000);
    if (options.clock) await context.clock.install();
    const page = await context.newPage();
    const problems: string[] = [];
    page.on('console', (message) => {
      // The browser reports each 4xx/5xx answer (a 401 after revocation, say) as a console error: expected.
      if (message.type() === 'error' && !message.text().startsWith('Failed to load resource'))
        problems.push(`console: ${message.text()}`);
    });
    page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
    page.on('dialog', (dialog) => {
      problems.push(`dialog: ${dialog.message()}`);
      void dialog.dismiss();
    });
    page.on('request', (request) => {
      if (!request.url().startsWith(`${w.baseUrl}/`) && !request.url().startsWith('data:'))
        problems.push(`request to another origin: ${request.url()}`);
    });
    await page.goto(url);
    return { page, context, problems };
  }

  /** A tab of the portal's navigation. */
  const tab = (page: Page, name: string): Locator =>
    page.getByRole('navigation', { name: 'Portal' }).getByRole('link', { name });

  /** The card of one webhook on the endpoints page. */
  const card = (page: Page, name: string): Locator =>
    page.locator('article.card', { has: page.getByRole('heading', { name }) });

  /** PATCHes the Deployment stopped webhook through the API with the vendor's key (a test's clean-up). */
  const patchStopped = (payload: object) =>
    w.t.app.inject({
      method: 'PATCH',
      url: `/vendors/v1/webhooks/${w.webhooks.deploymentStopped}`,
      headers: { 'x-api-key': w.vendorKey },
      payload,
    });

  /** Makes the failing receiver fail the next event (500 and HOSTILE_BODY), ingests one, and answers its dead letter's id. */
  async function deadLetter(): Promise<string> {
    w.bad.script('/deployments', { status: 500, headers: { 'content-type': 'text/html' }, body: HOSTILE_BODY });
    await w.ingest('EVENT_TYPE_DEPLOYMENT_STOPPED');
    const res = await w.t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${w.webhooks.deploymentStopped}/dead-letters?limit=1`,
      headers: { 'x-api-key': w.vendorKey },
    });
    return res.json<{ dead_letters: { delivery_id: string }[] }>().dead_letters[0]!.delivery_id;
  }

  /** How long a poll waits for the page to show something (its own fetches and renders, on a busy machine). */
  const SHOWN = { timeout: 15_000 };

  const scrollWidth = (page: Page) => page.evaluate<number>('document.scrollingElement.scrollWidth');

  /** How many dead letters a webhook (by default the failing receiver's) has, as the API counts them. */
  async function deadLetterCount(webhookId = w.webhooks.deploymentStopped): Promise<number> {
    const res = await w.t.app.inject({
      method: 'GET',
      url: `/vendors/v1/webhooks/${webhookId}/dead-letters?limit=1`,
      headers: { 'x-api-key': w.vendorKey },
    });
    return res.json<{ total: number }>().total;
  }

  /**
   * Replays every dead letter of the delivery log's webhook as a vendor does: "Replay all", which
   * asks in the page with the count, then the confirmation. Nothing is replayed before it.
   */
  async function replayAll(page: Page, webhookId = w.webhooks.deploymentStopped): Promise<void> {
    const count = await deadLetterCount(webhookId);
    const bulkReplays: string[] = [];
    page.on('request', (request) => {
      if (request.method() === 'POST' && request.url().endsWith('/dead-letters/replay'))
        bulkReplays.push(request.url());
    });
    const letters = count === 1 ? '1 dead letter' : `${count} dead letters`;
    const asked = page.getByRole('group', { name: `Replay ${letters}` });
    await page.getByRole('button', { name: 'Replay all dead letters' }).click();
    await asked.getByText(`Replay all ${letters} of this webhook?`).waitFor();
    await asked.getByRole('button', { name: 'Cancel' }).click();
    await asked.waitFor({ state: 'detached' });
    await page.getByRole('button', { name: 'Replay all dead letters' }).click();
    await asked.getByRole('button', { name: `Replay ${letters}` }).click();
    await page.locator('.watch progress').waitFor();
    expect(bulkReplays).toHaveLength(1);
  }

  it('manage: a link opens the vendor’s webhooks only; a failed delivery shows its attempts and hostile body as text; replay, test event and rotation work; revoking ends access', async () => {
    const failed = await deadLetter();
    const link = await mint('manage');
    const { page, problems } = await open(link.url);

    // The token leaves the address bar; the header says whose portal this is and what it may do.
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    expect(page.url()).toBe(`${w.baseUrl}/portal/#/endpoints`);
    const header = page.locator('header.top');
    expect(await header.textContent()).toContain(VENDOR);
    expect(await header.textContent()).toContain('manage');
    await header.getByRole('button', { name: 'Sign out' }).waitFor();

    // The vendor's three webhooks, and nothing of the other vendor's.
    await page.getByRole('heading', { name: 'Deployment stopped' }).waitFor();
    await page.getByRole('heading', { name: 'Machine removed' }).waitFor();
    expect(await page.locator('article.card').count()).toBe(3);
    expect(await page.content()).not.toContain('/other-vendor-hook');
    await card(page, 'Machine removed').getByText('Disabled: receiver answered 410 Gone').waitFor();

    // Health at a glance, from the stats route: every delivery of this webhook went through.
    const machineCreated = card(page, 'Machine created');
    const lastHour = machineCreated.getByRole('row', { name: /^Last hour/ });
    await lastHour.waitFor();
    expect(await lastHour.getByRole('cell').first().textContent()).toBe('100 %');
    await machineCreated.getByText('Delivered · HTTP 200').waitFor();
    await machineCreated.getByText('Closed: deliveries flow').waitFor();
    expect(
      await card(page, 'Deployment stopped')
        .getByRole('row', { name: /^Last hour/ })
        .getByRole('cell')
        .first()
        .textContent(),
    ).not.toBe('100 %');

    // Secrets are hidden until revealed.
    expect(await page.content()).not.toContain(SECRET);
    await machineCreated.getByRole('button', { name: 'Reveal' }).click();
    await machineCreated.getByText(SECRET).waitFor();
    await machineCreated.getByRole('button', { name: 'Hide' }).click();
    expect(await page.content()).not.toContain(SECRET);

    // The failed delivery opens to its attempt; the receiver's markup is shown as text and runs nothing.
    await card(page, 'Deployment stopped').getByRole('link', { name: 'Delivery log' }).click();
    await page.locator(`a[href$="/${failed}"]`).click();
    await page.getByRole('heading', { name: `Delivery ${failed.slice(0, 8)}` }).waitFor();
    const attempt = page.getByRole('article', { name: 'Attempt 1' });
    await attempt.getByText('Server error (5xx) · HTTP 500').waitFor();
    expect(await attempt.locator('pre.snippet').textContent()).toBe(HOSTILE_BODY);
    expect(await page.locator('.detail img').count()).toBe(0);
    expect(await page.evaluate('window.__pwned')).toBeUndefined();
    // The headers that were sent, signature values masked.
    await attempt.getByText(/^Request headers sent/).click();
    const headers = attempt.locator('table.headers');
    await headers.getByRole('rowheader', { name: 'webhook-id' }).waitFor();
    expect(await headers.getByRole('row', { name: /^webhook-signature/ }).textContent()).toBe(
      'webhook-signaturev1,••••',
    );
    expect(await headers.getByRole('row', { name: /x-webhook-signature/ }).textContent()).toBe(
      'x-webhook-signaturesha256=••••',
    );
    expect(await attempt.textContent()).not.toMatch(/v1,[A-Za-z0-9+/]{20}/);

    // Replayed once the receiver answers again, and seen delivered.
    w.bad.script('/deployments', { status: 200 });
    const received = w.bad.at('/deployments').length;
    await page.getByRole('button', { name: 'Replay', exact: true }).click();
    await page.locator('.watch', { hasText: 'Replay:' }).getByText('Delivered · HTTP 200').waitFor();
    expect(w.bad.at('/deployments').length).toBeGreaterThan(received);

    // A test event, watched until it arrives.
    await page.getByRole('button', { name: 'Send test event' }).click();
    await page.locator('.watch', { hasText: 'Test event:' }).getByText('Delivered · HTTP 200').waitFor();
    await waitFor(() =>
      w.bad.at('/deployments').some((r) => (JSON.parse(r.body) as { data: { test?: boolean } }).data.test === true),
    );

    // Rotating a secret shows the new one once; the webhook now signs with it.
    await tab(page, 'Endpoints').click();
    await machineCreated.getByRole('button', { name: 'Rotate secret' }).click();
    await machineCreated
      .getByRole('group', { name: 'Rotate secret' })
      .getByRole('button', { name: 'Rotate secret' })
      .click();
    const shown = (await machineCreated.locator('.secret-new').textContent()) ?? '';
    expect(shown).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    expect((await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated))?.secret).toBe(shown);
    await machineCreated.getByRole('button', { name: 'Copy secret' }).waitFor();
    await machineCreated.getByRole('button', { name: 'I have stored it' }).click();
    expect(await page.content()).not.toContain(shown);

    // Revoked: the next call answers 401 and the page says so.
    const revoked = await fetch(`${w.baseUrl}/admin/v1/portal/sessions/${link.session_id}`, {
      method: 'DELETE',
      headers: { 'x-api-key': w.adminKey },
    });
    expect(revoked.status).toBe(204);
    await goTo(page, '#/notices');
    await page.getByText(EXPIRED_TEXT).waitFor();
    expect(await page.locator('nav.tabs').count()).toBe(0);
    expect(problems).toEqual([]);
  });

  it('read: no button that changes anything, and the server refuses a replay made with its cookie', async () => {
    const failed = await deadLetter();
    const { page, problems } = await open((await mint('read')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await card(page, 'Machine removed').getByText('Disabled: receiver answered 410 Gone').waitFor();
    const changing = /^(Add a webhook|Edit|Delete|Rotate secret|Pause|Enable|Reveal)$/;
    expect(await page.getByRole('button', { name: changing }).count()).toBe(0);
    // No secret reaches a read session at all.
    expect(await page.content()).not.toContain('whsec_');

    await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}/${failed}`);
    await page.getByRole('article', { name: 'Attempt 1' }).waitFor();
    expect(await page.locator('.detail').getByText('Dead letter').count()).toBe(1);
    expect(await page.getByRole('button', { name: /^(Replay|Send test event|Replay all dead letters)$/ }).count()).toBe(
      0,
    );

    const path = `/vendors/v1/webhooks/${w.webhooks.deploymentStopped}/dead-letters/${failed}/replay`;
    const refused = await page.evaluate(async (replayPath) => {
      const session = (await (await fetch('/portal/v1/session')).json()) as { csrf_token: string };
      const res = await fetch(replayPath, { method: 'POST', headers: { 'x-csrf-token': session.csrf_token } });
      return { status: res.status, body: (await res.json()) as { code: string } };
    }, path);
    expect(refused).toMatchObject({ status: 403, body: { code: 'portal_permission' } });
    expect(problems).toEqual([]);
  });

  it('replay: replays all dead letters with a live progress bar; no create, edit, delete or rotate', async () => {
    await deadLetter();
    await deadLetter();
    w.bad.script('/deployments', { status: 200 });
    const { page, problems } = await open((await mint('replay')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    expect(
      await page.getByRole('button', { name: /^(Add a webhook|Edit|Delete|Rotate secret|Pause|Enable)$/ }).count(),
    ).toBe(0);
    expect(await page.content()).not.toContain('whsec_');

    await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}`);
    await replayAll(page);
    await page.getByText('✓ Replay finished').waitFor();
    const bar = page.locator('.watch progress');
    const [value, max] = [await bar.getAttribute('value'), await bar.getAttribute('max')];
    expect(Number(value)).toBeGreaterThanOrEqual(2);
    expect(value).toBe(max);
    await page
      .locator('.watch')
      .getByText(/delivered, 0 failed/)
      .waitFor();
    expect(problems).toEqual([]);
  });

  it('notices: a disabled webhook with its reason, re-enabled and its dead letters replayed in one click', async () => {
    w.good.script('/removed', { status: 200 });
    const received = w.good.at('/removed').length;
    const { page, problems } = await open((await mint('manage')).url);
    await tab(page, 'Notices').click();
    const notice = page.locator('article.notice-card', { has: page.getByRole('heading', { name: 'Machine removed' }) });
    await notice.getByText('The receiver answered 410 Gone').waitFor();
    await notice.getByRole('button', { name: 'Re-enable and replay dead letters' }).click();
    await notice.getByText('✓ Replay finished').waitFor();
    expect((await w.t.webhooks.get(VENDOR, w.webhooks.machineRemoved))?.disabled).toBeUndefined();
    expect(w.good.at('/removed').length).toBeGreaterThan(received);
    expect(problems).toEqual([]);
  });

  it('a link works once: opened again elsewhere it fails, while the first browser keeps its session', async () => {
    const link = await mint('read');
    const first = await open(link.url);
    await first.page.getByRole('heading', { name: 'Machine created' }).waitFor();
    expect(first.page.url()).not.toContain('token=');

    const second = await open(link.url);
    await second.page.getByRole('heading', { name: 'This link does not open the portal' }).waitFor();
    await second.page.getByText(LINK_INVALID_TEXT).waitFor();
    expect(second.page.url()).not.toContain('token=');

    // The first browser's cookie still holds the session: a reload opens it without the token.
    await first.page.reload();
    await first.page.getByRole('heading', { name: 'Machine created' }).waitFor();
    expect([...first.problems, ...second.problems]).toEqual([]);
  });

  it('an expired link fails, and a session that expires while open loses access', async () => {
    const expire = (sessionId: string) =>
      w.t.redis.hset(w.t.keys.portal.session(sessionId), 'expiresAtMs', String(Date.now() - 1_000));
    const unopened = await mint('read');
    await expire(unopened.session_id);
    const late = await open(unopened.url);
    await late.page.getByText(LINK_INVALID_TEXT).waitFor();

    const link = await mint('read');
    const { page, problems } = await open(link.url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await expire(link.session_id);
    await goTo(page, '#/deliveries');
    await page.getByText(EXPIRED_TEXT).waitFor();
    expect([...late.problems, ...problems]).toEqual([]);
  });

  it('signing out ends the session on the server', async () => {
    const { page, problems } = await open((await mint('read')).url);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { name: 'Signed out' }).waitFor();
    expect(await page.evaluate(async () => (await fetch('/portal/v1/session')).status)).toBe(401);
    expect(problems).toEqual([]);
  });

  it('manage: custom headers, receiver auth and a client certificate are set in the form, shown without their secrets, and edited by merge', async () => {
    const apiKey = 'gateway-key-7f3a9c21';
    const tenant = 'tenant-5d0e42b8';
    const token = 'bearer-token-c81f3e07a4';
    const password = 'basic-password-96be1d55';
    const { page, problems } = await open((await mint('manage')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    const sent: unknown[] = [];
    page.on('request', (request) => {
      if (['POST', 'PATCH'].includes(request.method()) && /\/vendors\/v1\/webhooks(\/[^/]+)?$/.test(request.url()))
        sent.push(request.postDataJSON());
    });
    const stored = async () => {
      const res = await w.t.app.inject({
        method: 'GET',
        url: '/vendors/v1/webhooks',
        headers: { 'x-api-key': w.vendorKey },
      });
      return res
        .json<{ webhooks: Record<string, unknown>[] }>()
        .webhooks.find((webhook) => webhook.event_type === 'EVENT_TYPE_MACHINE_UPDATED');
    };
    const noSecretInPage = async (secrets: string[]) => {
      const html = await page.content();
      for (const secret of secrets) expect(html, 'a secret typed into the form').not.toContain(secret);
    };

    await page.getByRole('button', { name: 'Add a webhook' }).click();
    const form = page.getByRole('form', { name: 'Add a webhook' });
    await form.getByLabel('Event type').selectOption('EVENT_TYPE_MACHINE_UPDATED');
    await form.getByLabel('Callback URL').fill(`${w.good.base}/updated`);
    // Collapsed on a new webhook, opened by its summary.
    expect(await form.getByRole('button', { name: 'Add a header' }).isVisible()).toBe(false);
    await form.getByText('Receiver authentication').click();
    try {
      // A header the engine sends itself: the server's refusal shows in the form, and nothing is added.
      await form.getByRole('button', { name: 'Add a header' }).click();
      await form.getByLabel('Header 1 name').fill('Content-Type');
      await form.getByLabel('Header 1 value').fill('text/plain');
      await form.getByRole('button', { name: 'Add webhook' }).click();
      await form.getByRole('alert').filter({ hasText: 'header "Content-Type" cannot be set' }).waitFor();
      expect(await stored()).toBeUndefined();

      await form.getByLabel('Header 1 name').fill('X-Api-Key');
      await form.getByLabel('Header 1 value').fill(apiKey);
      await form.getByRole('button', { name: 'Add a header' }).click();
      await form.getByLabel('Header 2 name').fill('X-Tenant');
      await form.getByLabel('Header 2 value').fill(tenant);
      await form.getByLabel('Authentication', { exact: true }).selectOption('bearer');
      expect(await form.getByLabel('Token', { exact: true }).getAttribute('type')).toBe('password');
      await form.getByLabel('Token', { exact: true }).fill(token);
      await form.getByRole('button', { name: 'Add webhook' }).click();
      const updated = card(page, 'Machine updated');
      await updated.getByText('X-Api-Key: ••••').waitFor();
      await updated.getByText('X-Tenant: ••••').waitFor();
      await updated.getByText('Bearer token').waitFor();
      await page.getByRole('button', { name: 'I have stored it' }).click();
      expect(sent.at(-1)).toMatchObject({
        headers: { 'X-Api-Key': apiKey, 'X-Tenant': tenant },
        auth: { type: 'bearer', token },
      });
      expect(await stored()).toMatchObject({
        headers: { 'X-Api-Key': '••••', 'X-Tenant': '••••' },
        auth: { type: 'bearer' },
        tls_client_certificate: null,
      });
      await noSecretInPage([apiKey, tenant, token]);

      // Edited: the section opens with the saved names, values left empty; one header goes, basic auth replaces bearer.
      await updated.getByRole('button', { name: 'Edit' }).click();
      const edit = updated.getByRole('form', { name: 'Edit webhook' });
      const apiKeyValue = edit.getByLabel('Header 1 value');
      await apiKeyValue.waitFor();
      expect(await edit.getByLabel('Header 1 name').inputValue()).toBe('X-Api-Key');
      expect(await apiKeyValue.inputValue()).toBe('');
      expect(await apiKeyValue.getAttribute('placeholder')).toBe('unchanged — type to replace');
      expect(await edit.getByLabel('Authentication', { exact: true }).inputValue()).toBe('bearer');
      expect(await edit.getByLabel('Token', { exact: true }).getAttribute('placeholder')).toBe('unchanged');
      await edit.getByRole('button', { name: 'Remove header X-Tenant' }).click();
      await edit.getByLabel('Authentication', { exact: true }).selectOption('basic');
      await edit.getByLabel('Username', { exact: true }).fill('portal-user');
      await edit.getByLabel('Password', { exact: true }).fill(password);
      await edit.getByRole('button', { name: 'Save' }).click();
      await updated.getByText('Basic, username portal-user').waitFor();
      expect(await updated.getByText('X-Tenant: ••••').count()).toBe(0);
      // Only what changed: the kept header is not sent, the removed one is null.
      expect(sent.at(-1)).toEqual({
        headers: { 'X-Tenant': null },
        auth: { type: 'basic', username: 'portal-user', password },
      });
      const afterEdit = await stored();
      expect(Object.keys(afterEdit!.headers as object)).toEqual(['X-Api-Key']);
      expect(afterEdit!.auth).toEqual({ type: 'basic', username: 'portal-user' });
      const kept = await w.t.webhooks.getById(afterEdit!.webhook_id as string);
      expect(kept?.headers).toEqual([{ name: 'X-Api-Key', value: apiKey }]);
      await noSecretInPage([apiKey, tenant, token, password]);

      // A changed username without the password again is held back, with why, next to the password.
      await updated.getByRole('button', { name: 'Edit' }).click();
      await edit.getByLabel('Username', { exact: true }).fill('someone-else');
      const sentBefore = sent.length;
      await edit.getByRole('button', { name: 'Save' }).click();
      const passwordField = edit.getByLabel('Password', { exact: true });
      await edit.getByRole('alert').filter({ hasText: 'Type the password again' }).waitFor();
      expect(await passwordField.getAttribute('aria-invalid')).toBe('true');
      expect(await page.evaluate('document.activeElement.type')).toBe('password');
      expect(sent.length).toBe(sentBefore);
      await edit.getByRole('button', { name: 'Cancel' }).click();

      if (testCa !== undefined) {
        // A client certificate, for an https callback URL: its subject, expiry (soon: a warning) and fingerprint on the card.
        const issued = issueClientCertificate(testCa, 'portal-client');
        const certificate = { cert_pem: issued.cert, key_pem: issued.key };
        await updated.getByRole('button', { name: 'Edit' }).click();
        await edit.getByLabel('Callback URL').fill('https://localhost:9/updated');
        await edit.getByLabel('Certificate (PEM)').fill(certificate.cert_pem);
        const keyField = edit.getByLabel('Private key (PEM)');
        expect(await keyField.getAttribute('spellcheck')).toBe('false');
        expect(await keyField.getAttribute('autocomplete')).toBe('off');
        await keyField.fill(certificate.key_pem);
        // Another host: the saved header value and password would go there unseen, so the form asks for them first.
        const sentBeforeMove = sent.length;
        await edit.getByRole('button', { name: 'Save' }).click();
        await edit
          .getByRole('alert')
          .filter({ hasText: 'Type the value of X-Api-Key again, or remove the header' })
          .waitFor();
        await edit
          .getByRole('alert')
          .filter({ hasText: 'Type the password again, or set Authentication to None' })
          .waitFor();
        expect(sent.length).toBe(sentBeforeMove);
        await edit.getByLabel('Header 1 value').fill(apiKey);
        await edit.getByLabel('Password', { exact: true }).fill(password);
        // A header added elsewhere after the form opened is one the form cannot restate: the API's 409 says which.
        const late = await w.t.app.inject({
          method: 'PATCH',
          url: `/vendors/v1/webhooks/${afterEdit!.webhook_id as string}`,
          headers: { 'x-api-key': w.vendorKey },
          payload: { headers: { 'X-Late': 'late-value-1' } },
        });
        expect(late.statusCode, late.body).toBe(200);
        await edit.getByRole('button', { name: 'Save' }).click();
        await edit.getByRole('alert').filter({ hasText: 'headers "X-Late" (their values)' }).waitFor();
        expect((await stored())!.callback_url).toBe(`${w.good.base}/updated`);
        await w.t.app.inject({
          method: 'PATCH',
          url: `/vendors/v1/webhooks/${afterEdit!.webhook_id as string}`,
          headers: { 'x-api-key': w.vendorKey },
          payload: { headers: { 'X-Late': null } },
        });
        await edit.getByRole('button', { name: 'Save' }).click();
        await updated.getByText('CN=portal-client, O=Hookline Tests').waitFor();
        expect(sent.at(-1)).toMatchObject({
          callback_url: 'https://localhost:9/updated',
          headers: { 'X-Api-Key': apiKey },
          auth: { type: 'basic', username: 'portal-user', password },
        });
        await updated
          .locator('.badge.tone-warn')
          .filter({ hasText: /^⚠ Expires in \d+ h$/ })
          .waitFor();
        const withCertificate = await stored();
        const described = withCertificate!.tls_client_certificate as { fingerprint_sha256: string };
        expect(described).toMatchObject({ subject: 'CN=portal-client, O=Hookline Tests' });
        expect(await updated.locator(`code[title="${described.fingerprint_sha256}"]`).count()).toBe(1);
        const keyBody = certificate.key_pem.split('\n')[1]!;
        await noSecretInPage([apiKey, tenant, token, password, keyBody]);

        await updated.getByRole('button', { name: 'Edit' }).click();
        await edit.getByRole('button', { name: 'Remove certificate' }).click();
        await edit.getByRole('button', { name: 'Save' }).click();
        await updated.getByText('CN=portal-client, O=Hookline Tests').waitFor({ state: 'detached' });
        expect(sent.at(-1)).toEqual({ tls_client_certificate: null });
        expect((await stored())!.tls_client_certificate).toBeNull();
      }
      expect(problems).toEqual([]);
    } finally {
      const webhook = (await w.t.webhooks.list(VENDOR)).find((wh) => wh.eventType === 'EVENT_TYPE_MACHINE_UPDATED');
      if (webhook) await w.t.webhooks.delete(VENDOR, webhook.id);
    }
  });

  it('fits a 375 px wide screen: no page scrolls sideways, long badges and open forms included', async () => {
    const failed = await deadLetter();
    // An open circuit: the longest badge the pages show, on the endpoint card and in the notices.
    const nowMs = Date.now();
    await w.t.circuits.changed(
      [w.webhooks.deploymentStopped],
      { state: 'open', reason: 'failures', endpoint: w.bad.base, openedAtMs: nowMs, probeAtMs: nowMs + 60_000 },
      nowMs,
    );
    // Receiver authentication on a card: header names and OAuth2's long fields.
    const patchStopped = async (payload: Record<string, unknown>) => {
      const res = await w.t.app.inject({
        method: 'PATCH',
        url: `/vendors/v1/webhooks/${w.webhooks.deploymentStopped}`,
        headers: { 'x-api-key': w.vendorKey },
        payload,
      });
      expect(res.statusCode, res.body).toBe(200);
    };
    await patchStopped({
      headers: { 'X-Api-Key': 'k', 'X-Tenant-Identifier-For-The-Gateway': 'v' },
      auth: {
        type: 'oauth2_client_credentials',
        token_url: 'https://auth.example.com/oauth2/a-rather-long-tenant-name/v2.0/token',
        client_id: '0f6c9b1e-5d2a-4a7e-9c3b-8e1f2d4a6b7c',
        client_secret: 'client-secret',
        scope: 'https://receiver.example.com/.default',
      },
    });
    try {
      const { page, problems } = await open((await mint('manage')).url, { width: 375, height: 800 });
      const fits = async (where: string) => expect(await scrollWidth(page), where).toBeLessThanOrEqual(375);
      const openBadge = CIRCUIT_OPEN_TEXT;
      await card(page, 'Deployment stopped').getByText(openBadge).waitFor();
      await card(page, 'Deployment stopped').getByText('X-Tenant-Identifier-For-The-Gateway: ••••').waitFor();
      await fits('endpoints');
      await card(page, 'Machine created').getByRole('button', { name: 'Edit' }).click();
      await card(page, 'Machine created').getByRole('button', { name: 'Try on a sample event' }).click();
      await card(page, 'Machine created')
        .getByText(/this event would be sent/)
        .waitFor();
      await fits('endpoints, a webhook being edited');
      // The receiver authentication section open, with a header row and the most fields auth has.
      const edit = card(page, 'Machine created').getByRole('form', { name: 'Edit webhook' });
      await edit.getByText('Receiver authentication').click();
      await edit.getByRole('button', { name: 'Add a header' }).click();
      await edit.getByLabel('Header 1 name').fill('X-A-Rather-Long-Header-Name-For-A-Phone');
      await edit.getByLabel('Authentication', { exact: true }).selectOption('oauth2_client_credentials');
      await edit.getByLabel('Token URL (https)').fill('https://auth.example.com/oauth2/a/long/path/to/the/token');
      await edit.getByRole('button', { name: 'Save' }).click();
      await edit.getByRole('alert').filter({ hasText: 'Type the client ID.' }).waitFor();
      await fits('endpoints, receiver authentication open');
      await card(page, 'Machine created').getByRole('button', { name: 'Cancel' }).click();
      await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}/${failed}`);
      await page.getByRole('article', { name: 'Attempt 1' }).waitFor();
      await fits('delivery log');
      // The events table with an event's payload open, and the range replay form.
      await goTo(page, `#/events/${w.webhooks.deploymentStopped}`);
      await page.locator('button.event-id').first().click();
      await page.locator('#event-detail pre.payload').waitFor();
      await page.getByRole('button', { name: 'Replay a time range' }).click();
      await page.getByRole('form', { name: 'Replay a time range' }).waitFor();
      await fits('events, a payload and the range replay form open');
      await tab(page, 'Event catalogue').click();
      await page.getByRole('heading', { name: 'Verify a signature' }).waitFor();
      await page.getByRole('heading', { name: 'Payload filters' }).waitFor();
      await fits('catalogue');
      await tab(page, 'Notices').click();
      await page.locator('article.notice-card', { hasText: 'deliveries held back' }).getByText(openBadge).waitFor();
      await fits('notices');
      expect(problems).toEqual([]);
    } finally {
      await w.t.circuits.changed([w.webhooks.deploymentStopped], undefined, Date.now());
      await patchStopped({ headers: null, auth: null });
    }
  });

  it('at 375 px the tabs scroll sideways, never the page: a fade and an arrow show where more tabs lie, and the last tab is reached and shown', async () => {
    const { page, problems } = await open((await mint('read')).url, { width: 375, height: 800 });
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    /** Whether the frame's fade on that side shows: its arrow drawn and fully opaque. */
    const fade = (side: 'before' | 'after') =>
      page.evaluate<boolean>(
        `(() => { const style = getComputedStyle(document.querySelector('.tabs-frame'), '::${side}'); ` +
          `return style.content !== 'none' && style.opacity === '1'; })()`,
      );
    const widths = await page.evaluate<{ scroll: number; client: number }>(
      `(() => { const nav = document.querySelector('nav.tabs'); return { scroll: nav.scrollWidth, client: nav.clientWidth }; })()`,
    );
    // The tabs do not fit (else there would be nothing to hint at), and the page does not scroll sideways.
    expect(widths.scroll).toBeGreaterThan(widths.client);
    expect(await scrollWidth(page)).toBeLessThanOrEqual(375);
    await expect.poll(() => fade('after'), SHOWN).toBe(true);
    expect(await fade('before')).toBe(false);

    await tab(page, 'Notices').click();
    await page.getByRole('heading', { name: 'Notices' }).waitFor();
    await expect.poll(() => tab(page, 'Notices').getAttribute('aria-current'), SHOWN).toBe('page');
    // Scrolled to the end: the last tab in full view, the fade now on the other side.
    const last = (await tab(page, 'Notices').boundingBox())!;
    expect(last.x).toBeGreaterThanOrEqual(0);
    expect(last.x + last.width).toBeLessThanOrEqual(375);
    await expect.poll(() => fade('before'), SHOWN).toBe(true);
    await expect.poll(() => fade('after'), SHOWN).toBe(false);
    expect(await scrollWidth(page)).toBeLessThanOrEqual(375);

    // Followed from a link elsewhere, the page's tab is brought into view too.
    await goTo(page, '#/endpoints');
    await expect.poll(() => fade('after'), SHOWN).toBe(true);
    const first = (await tab(page, 'Endpoints').boundingBox())!;
    expect(first.x).toBeGreaterThanOrEqual(0);
    expect(problems).toEqual([]);
  });

  it('the delivery log tells its rows apart: each shows its event id (whole on hover), the machine or deployment it concerns, and the time', async () => {
    await deadLetter();
    const { page, problems } = await open((await mint('read')).url);
    for (const webhookId of [w.webhooks.machineCreated, w.webhooks.deploymentStopped]) {
      const listed = (
        await w.t.app.inject({
          method: 'GET',
          url: `/vendors/v1/webhooks/${webhookId}/deliveries?limit=25`,
          headers: { 'x-api-key': w.vendorKey },
        })
      ).json<{
        deliveries: {
          delivery_id: string;
          event_id: string;
          created_at: string;
          machine_id: string | null;
          deployment_id: string | null;
        }[];
      }>().deliveries;
      await goTo(page, `#/deliveries/${webhookId}`);
      await page.getByRole('list', { name: 'Deliveries, newest first' }).waitFor();
      const rows = page.locator('ul.deliveries a.delivery-row');
      await expect.poll(() => rows.count(), SHOWN).toBe(listed.length);
      // The fixture's events: three machines created, and at least one deployment stopped.
      const named = listed.filter((d) =>
        webhookId === w.webhooks.machineCreated ? d.machine_id !== null : d.deployment_id !== null,
      );
      expect(named.length).toBeGreaterThanOrEqual(webhookId === w.webhooks.machineCreated ? 3 : 1);
      const texts = await rows.allInnerTexts();
      // No two rows read alike, however many share a type and a status.
      expect(new Set(texts).size).toBe(texts.length);
      for (const [i, d] of listed.entries()) {
        const row = rows.nth(i);
        expect(await row.getAttribute('href')).toContain(d.delivery_id);
        expect(await row.locator(`code[title="${d.event_id}"]`).innerText()).toBe(d.event_id.slice(0, 8));
        // A test event (other tests send some) concerns no machine.
        if (d.machine_id !== null) expect(texts[i]).toContain(`machine ${d.machine_id}`);
        if (d.deployment_id !== null) expect(texts[i]).toContain(`deployment ${d.deployment_id}`);
        expect(await row.locator('time').getAttribute('datetime')).toBe(d.created_at);
      }
    }
    expect(problems).toEqual([]);
  });

  it('the filter editor: a changed filter clears the last dry run, and a dry run’s error shows next to the filter', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const stopped = card(page, 'Deployment stopped');
    await stopped.getByRole('button', { name: 'Edit' }).click();
    const form = stopped.getByRole('form', { name: 'Edit webhook' });
    const filterField = form.getByLabel('Payload filter (JSON; empty: every event of the type)');
    const verdict = form.getByText(/this event would (not )?be sent/);

    await filterField.fill('{"path": "data.status", "eq": "STATUS_FAILED"}');
    await form.getByRole('button', { name: 'Try on a sample event' }).click();
    await form.getByText('✓ Matches: this event would be sent.').waitFor();
    // One character more and the verdict above no longer speaks for the filter.
    await filterField.press('End');
    await filterField.press('Backspace');
    expect(await verdict.count()).toBe(0);

    // Errors, the page's (not JSON) and the API's (a bad path), show under the filter, and name it invalid.
    for (const [text, error] of [
      ['{"path": "data.status",', 'The payload filter is not valid JSON.'],
      ['{"path": "status", "eq": "x"}', /filter\.path: must start with data/],
    ] as const) {
      await filterField.fill(text);
      await form.getByRole('button', { name: 'Try on a sample event' }).click();
      const shown = form.getByRole('alert').filter({ hasText: error });
      await shown.waitFor();
      expect(await filterField.getAttribute('aria-invalid')).toBe('true');
      const described = (await filterField.getAttribute('aria-describedby'))!
        .split(' ')
        .map((id) => `[id="${id}"]`)
        .join(', ');
      expect(await page.locator(described).getByRole('alert').filter({ hasText: error }).count()).toBe(1);
      const [field, alert] = [await filterField.boundingBox(), await shown.boundingBox()];
      expect(alert!.y - (field!.y + field!.height), 'the error is right below the filter').toBeLessThan(150);
    }
    await filterField.fill('');
    expect(await form.getByRole('alert').count()).toBe(0);
    expect(await filterField.getAttribute('aria-invalid')).toBeNull();
    await form.getByRole('button', { name: 'Cancel' }).click();
    expect(problems).toEqual([]);
  });

  it('manage: a webhook added with a payload filter and a concurrency ceiling keeps both', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    await page.getByRole('button', { name: 'Add a webhook' }).click();
    const form = page.getByRole('form', { name: 'Add a webhook' });
    await form.getByLabel('Event type').selectOption('EVENT_TYPE_DEPLOYMENT_CREATED');
    await form.getByLabel('Callback URL').fill(`${w.good.base}/created`);
    await form.getByLabel('Concurrent requests at most, per worker (empty: as many as the endpoint takes)').fill('3');
    await form
      .getByLabel('Payload filter (JSON; empty: every event of the type)')
      .fill('{"path": "data.status", "eq": "STATUS_RUNNING"}');
    await form.getByRole('button', { name: 'Add webhook' }).click();
    const added = card(page, 'Deployment created');
    try {
      await added.getByText('{"path":"data.status","eq":"STATUS_RUNNING"}').waitFor();
      await added.getByText('No rate limit; up to 3 at once per worker; signed with the secret (HMAC)').waitFor();
      const stored = (await w.t.webhooks.list(VENDOR)).find(
        (webhook) => webhook.eventType === 'EVENT_TYPE_DEPLOYMENT_CREATED',
      );
      expect(stored).toMatchObject({ filter: { path: 'data.status', eq: 'STATUS_RUNNING' }, maxConcurrency: 3 });
      expect(problems).toEqual([]);
    } finally {
      const stored = (await w.t.webhooks.list(VENDOR)).find(
        (webhook) => webhook.eventType === 'EVENT_TYPE_DEPLOYMENT_CREATED',
      );
      if (stored) await w.t.webhooks.delete(VENDOR, stored.id);
    }
  });

  it('a bulk replay whose replays fail again ends with a red bar that says how many failed', async () => {
    await deadLetter();
    const count = await deadLetterCount();
    const { page, problems } = await open((await mint('replay')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}`);
    await replayAll(page);
    const watch = page.locator('.watch', { has: page.locator('progress') });
    await watch.getByText('✗ Replay finished with failures').waitFor();
    await watch.getByText(`${count} of ${count} settled: 0 delivered, ${count} failed.`).waitFor();
    const bar = watch.locator('progress');
    expect(await bar.getAttribute('class')).toBe('ended-bad');
    // The bar is drawn in the page's "bad" red, not its accent blue.
    const colours = await page.evaluate<{ bar: string; bad: string }>(
      "({ bar: getComputedStyle(document.querySelector('.watch progress')).accentColor, bad: getComputedStyle(document.documentElement).getPropertyValue('--bad').trim() })",
    );
    expect(colours.bar).toBe('rgb(180, 35, 24)');
    expect(colours.bad).toBe('#b42318');
    expect(problems).toEqual([]);
  });

  it('replay: a bulk replay is cancelled mid-run from its progress bar; what was queued is delivered, the rest stay dead letters', async () => {
    // Four pages of 100 dead letters: the run queues them a page at a time, and the vendor stops it
    // long before its last page. Were it stopped before its first, the counts below would still hold.
    const letters = 400;
    const path = '/cancelled-replays';
    const api = (method: 'POST' | 'PATCH', url: string, payload: object) =>
      w.t.app.inject({ method, url, headers: { 'x-api-key': w.vendorKey }, payload });
    const created = await api('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
      callback_url: `${w.good.base}${path}`,
    });
    expect(created.statusCode, created.body).toBe(201);
    const webhookId = created.json<{ webhook_id: string }>().webhook_id;
    try {
      // Disabled for failing, as the engine does it: what arrives becomes a dead letter unsent, so
      // there are hundreds at once without hundreds of failed sends (which would open the circuit).
      expect(await w.t.webhooks.disable(webhookId, 'failing')).toBe(true);
      await w.ingest('EVENT_TYPE_DEPLOYMENT_UPDATED', letters);
      await waitFor(async () => (await deadLetterCount(webhookId)) === letters, 10_000, `${letters} dead letters`);
      expect((await api('PATCH', `/vendors/v1/webhooks/${webhookId}`, { enabled: true })).statusCode).toBe(200);
      // Replays take a moment to answer, so the stopping run stays in view until they have.
      w.good.script(path, { status: 200, delayMs: 300 });

      const { page, problems } = await open((await mint('replay')).url);
      await page.getByRole('heading', { name: 'Machine created' }).waitFor();
      await page.goto(`${w.baseUrl}/portal/#/deliveries/${webhookId}`);
      const cancelPosts: string[] = [];
      page.on('request', (request) => {
        if (request.method() === 'POST' && request.url().endsWith('/cancel')) cancelPosts.push(request.url());
      });
      await replayAll(page, webhookId);
      const watch = page.locator('.watch', { has: page.locator('progress') });
      const cancelButton = watch.getByRole('button', { name: 'Cancel replay' });
      await cancelButton.waitFor();
      expect(await watch.locator('label').textContent()).toBe('Replaying dead letters…');

      // Asked in the page; "Keep going" sends nothing.
      const asked = watch.getByRole('group', { name: 'Cancel replay' });
      const question =
        'Stop this replay? Replays already queued will still be delivered; dead letters not reached stay dead letters.';
      await cancelButton.click();
      await asked.getByText(question).waitFor();
      await asked.getByRole('button', { name: 'Keep going' }).click();
      await asked.waitFor({ state: 'detached' });
      expect(cancelPosts).toEqual([]);

      await cancelButton.click();
      const answered = page.waitForResponse(
        (response) => response.request().method() === 'POST' && response.url().endsWith('/cancel'),
      );
      await asked.getByRole('button', { name: 'Confirm' }).click();
      const cancel = await answered;
      expect(cancel.status()).toBe(202);
      const { task_id: taskId } = (await cancel.json()) as { task_id: string };
      const stopping = watch.getByRole('button', { name: 'Stopping…' });
      await stopping.waitFor();
      expect(await stopping.isDisabled()).toBe(true);

      // The end comes from the server: failed, saying it was cancelled, drawn as a warning (nothing failed again).
      await watch.getByText('■ Replay cancelled').waitFor({ timeout: 30_000 });
      const ended = await w.t.app.inject({
        method: 'GET',
        url: `/rental/v1/tasks/${taskId}`,
        headers: { 'x-api-key': w.vendorKey },
      });
      const task = ended.json<{ status: string; fail_reason: string; progress: { queued: number } }>();
      const queued = task.progress.queued;
      const left = await deadLetterCount(webhookId);
      expect(task.status).toBe('failed');
      expect(task.fail_reason).toBe(
        `cancelled after ${queued} of ${letters} dead letters were replayed (${queued} delivered, 0 failed again); the others stay dead letters`,
      );
      expect(await watch.getByRole('status').textContent()).toBe(`${task.fail_reason}.`);
      expect(await watch.locator('progress').getAttribute('class')).toBe('ended-warn');
      expect(await watch.getByRole('button').count()).toBe(0);
      // What was queued was delivered; the dead letters the run did not reach are still there.
      expect(left).toBeGreaterThan(0);
      expect(left).toBe(letters - queued);
      expect(w.good.at(path)).toHaveLength(queued);
      expect(cancelPosts).toHaveLength(1);
      expect(problems).toEqual([]);
    } finally {
      await w.t.webhooks.delete(VENDOR, webhookId);
    }
  });

  it('a visit without a link (a bookmark) says how to get one, not that access ended', async () => {
    for (const address of [
      `${w.baseUrl}/portal/`,
      `${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}`,
    ]) {
      const { page, problems } = await open(address);
      await page.getByRole('heading', { name: 'Open the portal with a link' }).waitFor();
      await page
        .getByText('Ask the platform (or the operator who runs Hookline for it) for a new link to your portal.')
        .waitFor();
      expect(await page.getByText('Access ended').count()).toBe(0);
      expect(await page.getByText(EXPIRED_TEXT).count()).toBe(0);
      expect(problems).toEqual([]);
    }
  });

  it('over plain http off loopback (where the Secure cookie would be dropped) says so, and leaves the link unspent', async () => {
    // A name that is not loopback to the browser, mapped to the API's 127.0.0.1: no secure context.
    const insecure = await launchChromium(['--host-resolver-rules=MAP portal.test 127.0.0.1']);
    try {
      const link = await mint('manage');
      const page = await (await insecure.newContext()).newPage();
      await page.goto(link.url.replace(/^http:\/\/127\.0\.0\.1:/, 'http://portal.test:'));
      await page.getByRole('heading', { name: 'The portal needs a secure connection' }).waitFor();
      expect(await page.evaluate('window.isSecureContext')).toBe(false);
      const session = (await w.t.portalSessions.list(VENDOR)).find((s) => s.id === link.session_id);
      expect(session).toMatchObject({ opened: false });
    } finally {
      await insecure.close();
    }
  });

  it('warns five minutes before the session ends, with the time left', async () => {
    // The shortest session a link can have: the warning is there from the start.
    const short = await open((await mint('read', '5m')).url);
    await short.page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await short.page
      .getByRole('status')
      .filter({ hasText: /^⚠ Your portal session ends in 5 min\. To keep working after that, ask for a new link\.$/ })
      .waitFor();

    // An hour's session: no warning until its last five minutes, then the time left.
    const { page, problems } = await open((await mint('read', '1h')).url, undefined, { clock: true });
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    const warning = page.getByRole('status').filter({ hasText: 'Your portal session ends in' });
    expect(await warning.count()).toBe(0);
    await page.clock.fastForward('55:30');
    await warning.filter({ hasText: 'ends in 5 min' }).waitFor();
    expect(await page.locator('header.top time').textContent()).toBe('in 5 min');
    await page.clock.fastForward('04:05');
    // The last minute counts down in 10-second steps.
    await warning.filter({ hasText: /ends in [1-6]0 s\./ }).waitFor();
    expect([...short.problems, ...problems]).toEqual([]);
  });

  it('is usable with the keyboard: tabbing reaches the navigation and Enter follows it', async () => {
    const { page, problems } = await open((await mint('read')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.textContent')).toBe('Skip to content');
    // Sign out, then the tabs: the catalogue is the fifth stop after the skip link.
    for (let i = 0; i < 5; i++) await page.keyboard.press('Tab');
    expect(await page.evaluate('document.activeElement.textContent')).toBe('Event catalogue');
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { name: 'Verify a signature' }).waitFor();
    expect(problems).toEqual([]);
  });

  it('replay: the Events view lists a webhook’s feed oldest first and opens a payload; a time range typed in the browser’s zone is counted as the API counts it, replayed with a progress bar, and reaches the receiver', async () => {
    const path = '/range-replays';
    const api = (method: 'GET' | 'POST', url: string, payload?: object) =>
      w.t.app.inject({ method, url, headers: { 'x-api-key': w.vendorKey }, ...(payload ? { payload } : {}) });
    const created = await api('POST', '/vendors/v1/webhooks', {
      event_type: 'EVENT_TYPE_DEPLOYMENT_UPDATED',
      callback_url: `${w.good.base}${path}`,
    });
    expect(created.statusCode, created.body).toBe(201);
    const webhookId = created.json<{ webhook_id: string }>().webhook_id;
    try {
      await w.ingest('EVENT_TYPE_DEPLOYMENT_UPDATED', 5);
      const feed = (await api('GET', `/vendors/v1/webhooks/${webhookId}/events?limit=200`)).json<{
        events: { event_id: string; accepted_at: string; payload: unknown }[];
      }>().events;
      expect(feed).toHaveLength(5);
      expect(w.good.at(path)).toHaveLength(5);

      // A zone half an hour off whole hours and without daylight saving: local = UTC + 5:30, always.
      const { page, problems } = await open((await mint('replay')).url, undefined, { timezoneId: 'Asia/Kolkata' });
      await page.getByRole('heading', { name: 'Machine created' }).waitFor();
      await card(page, 'Deployment updated').getByRole('link', { name: 'Events' }).click();
      const table = page.locator('table.events');
      await table.getByRole('button', { name: feed[4]!.event_id }).waitFor();
      expect(await table.locator('button.event-id').allTextContents()).toEqual(feed.map((e) => e.event_id));
      expect(await table.getByText('Delivered').count()).toBe(5);
      await table.getByRole('button', { name: feed[0]!.event_id }).click();
      const detail = page.locator('#event-detail');
      expect(JSON.parse((await detail.locator('pre.payload').textContent()) ?? '')).toEqual(feed[0]!.payload);
      await detail.getByRole('button', { name: 'Close' }).click();
      await detail.waitFor({ state: 'detached' });

      // From the minute before the first event to the minute after the last, typed as local times.
      const sinceMs = Math.floor(Date.parse(feed[0]!.accepted_at) / 60_000) * 60_000 - 60_000;
      const untilMs = Math.ceil(Date.parse(feed[4]!.accepted_at) / 60_000) * 60_000 + 60_000;
      const kolkata = (ms: number) => new Date(ms + 5.5 * 3_600_000).toISOString().slice(0, 16);
      const utc = (ms: number) => new Date(ms).toISOString().replace('.000Z', 'Z');
      await page.getByRole('button', { name: 'Replay a time range' }).click();
      const form = page.getByRole('form', { name: 'Replay a time range' });
      // Chromium may name the zone by its older alias.
      await form.getByText(/Times are in your time zone \(Asia\/(Kolkata|Calcutta)\)/).waitFor();
      await form.getByLabel('From').fill(kolkata(sinceMs));
      await form.getByText(`Sent as ${utc(sinceMs)} (UTC).`).waitFor();

      // The wrong way round: the API's 400 and its words.
      await form.getByLabel('To (empty: now)').fill(kolkata(sinceMs - 3_600_000));
      await form.getByRole('button', { name: 'Count events' }).click();
      await form.getByRole('alert').filter({ hasText: 'Invalid request body: since is after until' }).waitFor();

      await form.getByLabel('To (empty: now)').fill(kolkata(untilMs));
      await form.getByText(`Sent as ${utc(untilMs)} (UTC).`).waitFor();
      const range = { since: utc(sinceMs), until: utc(untilMs) };
      const dryRun = await api('POST', `/vendors/v1/webhooks/${webhookId}/replay`, { ...range, dry_run: true });
      expect(dryRun.statusCode, dryRun.body).toBe(200);
      const { count } = dryRun.json<{ count: number }>();
      expect(count).toBe(5);
      const counting = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/replay'));
      await form.getByRole('button', { name: 'Count events' }).click();
      expect((await counting).postDataJSON()).toEqual({ ...range, dry_run: true });
      await form.getByText(`${count} events would be sent again.`).waitFor();
      expect(w.good.at(path)).toHaveLength(5);

      const starting = page.waitForRequest((r) => r.method() === 'POST' && r.url().endsWith('/replay'));
      await form.getByRole('button', { name: `Replay ${count} events` }).click();
      expect((await starting).postDataJSON()).toEqual(range);
      const watch = page.locator('.watch', { has: page.locator('progress') });
      await watch.getByText('✓ Replay finished').waitFor({ timeout: 30_000 });
      await watch.getByText(`${count} of ${count} settled: ${count} delivered, 0 failed.`).waitFor();
      const bar = watch.locator('progress');
      expect(await bar.getAttribute('value')).toBe(String(count));
      expect(await bar.getAttribute('max')).toBe(String(count));
      expect(await bar.getAttribute('class')).toBe('ended-ok');
      // Each event reached the receiver once more, under its own event id (webhook-id).
      const replays = w.good.at(path).slice(5);
      expect(replays.map((r) => r.headers['webhook-id']).sort()).toEqual(feed.map((e) => e.event_id).sort());
      expect(problems).toEqual([]);

      // A read session sees the events, and nothing that replays them.
      const reader = await open((await mint('read')).url);
      await goTo(reader.page, `#/events/${webhookId}`);
      await reader.page.locator('table.events').getByRole('button', { name: feed[4]!.event_id }).waitFor();
      expect(await reader.page.getByRole('button', { name: 'Replay a time range' }).count()).toBe(0);
      expect(reader.problems).toEqual([]);
    } finally {
      await w.t.webhooks.delete(VENDOR, webhookId);
    }
  });

  it('a link followed by a change of the fragment before the page’s first effects run still opens its session, on the page asked for', async () => {
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    contexts.push(context);
    context.setDefaultTimeout(15_000);
    // The page's timers and animation frames wait while the clock is paused: the session opens in an
    // effect, which runs only once the clock resumes, after the fragment changed.
    await context.clock.install();
    await context.clock.pauseAt(Date.now() + 60_000);
    const page = await context.newPage();
    await page.goto((await mint('read')).url);
    await goTo(page, `#/events/${w.webhooks.machineCreated}`);
    await context.clock.resume();
    await page.getByRole('navigation', { name: 'Portal' }).waitFor();
    await page.getByRole('heading', { name: 'Events' }).waitFor();
    expect(await page.getByText(LINK_INVALID_TEXT).count()).toBe(0);
  });

  it('manage: trace propagation turned on in the webhook form; the receiver gets a traceparent, and the attempt shows its trace id', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const stopped = card(page, 'Deployment stopped');
    const form = stopped.getByRole('form', { name: 'Edit webhook' });
    try {
      await stopped.getByRole('button', { name: 'Edit' }).click();
      await form.getByLabel('Send a traceparent header (W3C Trace Context)').check();
      const saving = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await saving).postDataJSON()).toEqual({ propagate_trace: true });
      await stopped.locator('dt:text-is("Trace propagation") + dd').waitFor();
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.propagateTrace).toBe(true);

      // One delivery answered 200, then the receiver fails again as the other tests expect.
      w.bad.script(
        '/deployments',
        { status: 200 },
        { status: 500, headers: { 'content-type': 'text/html' }, body: HOSTILE_BODY },
      );
      const before = w.bad.at('/deployments').length;
      await w.ingest('EVENT_TYPE_DEPLOYMENT_STOPPED');
      const header = String(w.bad.at('/deployments')[before]?.headers.traceparent);
      expect(header).toMatch(/^00-[0-9a-f]{32}-[0-9a-f]{16}-0[01]$/);
      const traceId = header.split('-')[1]!;
      // The delivery just made is listed once the delivery log's journal is projected.
      await deliveryLogCaughtUp(w.t);
      const [latest] = await w.t.deliveryLog.recent(w.webhooks.deploymentStopped, 1);
      await page.goto(`${w.baseUrl}/portal/#/deliveries/${w.webhooks.deploymentStopped}/${latest!.deliveryId}`);
      await page.getByRole('article', { name: 'Attempt 1' }).locator('.trace code', { hasText: traceId }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await patchStopped({ propagate_trace: false });
    }
  });

  it('manage: a retention set in the webhook form shows on the card; a refused one says why; emptied, the installation’s applies again', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const stopped = card(page, 'Deployment stopped');
    const shown = stopped.locator('dt:text-is("Retention") + dd');
    await shown.filter({ hasText: /^Installation default$/ }).waitFor();
    const form = stopped.getByRole('form', { name: 'Edit webhook' });
    const field = form.getByLabel('Retention (empty: the installation’s)');
    try {
      await stopped.getByRole('button', { name: 'Edit' }).click();
      await field.fill('30d');
      await form.getByRole('button', { name: 'Save' }).click();
      await form
        .getByRole('alert')
        .filter({ hasText: "retention must be at most the installation's retention" })
        .waitFor();
      await field.fill('3d');
      await form.getByRole('button', { name: 'Save' }).click();
      await shown.filter({ hasText: /^3d$/ }).waitFor();
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.retentionMs).toBe(3 * 86_400_000);

      await stopped.getByRole('button', { name: 'Edit' }).click();
      expect(await field.inputValue()).toBe('3d');
      await field.fill('');
      const saving = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await saving).postDataJSON()).toEqual({ retention: null });
      await shown.filter({ hasText: /^Installation default$/ }).waitFor();
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.retentionMs).toBeUndefined();
      expect(problems).toEqual([]);
    } finally {
      await patchStopped({ retention: null });
    }
  });

  it('manage: a retry policy shows on the card and in the edit form; one past the installation’s schedule is refused with why; emptied, the installation’s applies again', async () => {
    // This installation's schedule is one attempt and no retry (the fixture's [0]): the API refuses any
    // policy from the form, so the stored one is written to the store directly, as a wider installation
    // would have allowed it.
    const stored = await w.t.webhooks.update(VENDOR, w.webhooks.deploymentStopped, {
      retry: { scheduleMs: [30_000, 60_000], maxAgeMs: 120_000 },
    });
    expect(stored.ok).toBe(true);
    try {
      const { page, problems } = await open((await mint('manage')).url);
      const stopped = card(page, 'Deployment stopped');
      const shown = stopped.locator('dt:text-is("Retries") + dd');
      await shown.filter({ hasText: /^Retries after 30s, 1m; not sent after 2m$/ }).waitFor();
      const form = stopped.getByRole('form', { name: 'Edit webhook' });
      const delays = form.getByLabel('Retry delays (empty: the installation’s)');
      const maxAge = form.getByLabel('Max age (empty: none)');
      await stopped.getByRole('button', { name: 'Edit' }).click();
      expect([await delays.inputValue(), await maxAge.inputValue()]).toEqual(['30s, 1m', '2m']);

      await delays.fill('30s');
      const refused = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await refused).postDataJSON()).toEqual({ retry: { schedule: ['30s'], max_age: '2m' } });
      await form.getByRole('alert').filter({ hasText: "at most the installation's 0 retries" }).waitFor();

      await delays.fill('');
      await maxAge.fill('');
      const emptied = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await emptied).postDataJSON()).toEqual({ retry: null });
      await shown.filter({ hasText: /^The installation’s schedule$/ }).waitFor();
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.retry).toBeUndefined();
      expect(problems).toEqual([]);
    } finally {
      await patchStopped({ retry: null });
    }
  });

  it('manage: the fields sent, set in the webhook form, show on the card; a path outside data is refused; emptied, every field is sent', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const stopped = card(page, 'Deployment stopped');
    const form = stopped.getByRole('form', { name: 'Edit webhook' });
    const field = form.getByLabel('Fields sent (empty: every field)');
    const shown = stopped.locator('dt:text-is("Fields sent") + dd');
    try {
      await stopped.getByRole('button', { name: 'Edit' }).click();
      await field.fill('event_type');
      await form.getByRole('button', { name: 'Save' }).click();
      await form.getByRole('alert').filter({ hasText: 'must name a field under data' }).waitFor();
      await field.fill('data.status, data.image');
      const saving = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await saving).postDataJSON()).toEqual({ include_fields: ['data.status', 'data.image'] });
      await shown.filter({ hasText: 'data.status, data.image and the identifiers' }).waitFor();

      await stopped.getByRole('button', { name: 'Edit' }).click();
      expect(await field.inputValue()).toBe('data.status, data.image');
      await field.fill('');
      const emptied = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await emptied).postDataJSON()).toEqual({ include_fields: null });
      await shown.waitFor({ state: 'detached' });
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.includeFields).toBeUndefined();
      expect(problems).toEqual([]);
    } finally {
      await patchStopped({ include_fields: null });
    }
  });

  it('manage: a priority set in the webhook form shows on the card and is stored; set back, it is gone from the card', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const stopped = card(page, 'Deployment stopped');
    const form = stopped.getByRole('form', { name: 'Edit webhook' });
    const controls = stopped.locator('dt:text-is("Delivery controls") + dd');
    try {
      await stopped.getByRole('button', { name: 'Edit' }).click();
      await form.getByLabel('Priority').selectOption('high');
      const saving = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await saving).postDataJSON()).toEqual({ priority: 'high' });
      await controls.filter({ hasText: /; high priority$/ }).waitFor();
      expect((await w.t.webhooks.get(VENDOR, w.webhooks.deploymentStopped))?.priority).toBe('high');

      await stopped.getByRole('button', { name: 'Edit' }).click();
      expect(await form.getByLabel('Priority').inputValue()).toBe('high');
      await form.getByLabel('Priority').selectOption('normal');
      const back = page.waitForRequest((r) => r.method() === 'PATCH');
      await form.getByRole('button', { name: 'Save' }).click();
      expect((await back).postDataJSON()).toEqual({ priority: 'normal' });
      await controls.filter({ hasText: /\(HMAC\)$/ }).waitFor();
      expect(problems).toEqual([]);
    } finally {
      await patchStopped({ priority: 'normal' });
    }
  });

  // Last: it changes the Machine created webhook the other tests read.
  it('manage: delivery controls are set in the edit form, shown on the card, and the Ed25519 key is shown and rotated', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    const machineCreated = card(page, 'Machine created');
    await machineCreated.getByText('No rate limit; concurrent; signed with the secret (HMAC)').waitFor();
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    const form = machineCreated.getByRole('form', { name: 'Edit webhook' });
    await form.getByLabel('Rate limit: requests per second at most (empty: unlimited)').fill('5');
    await form.getByLabel('Signature').selectOption('ed25519');
    await form.getByLabel('Concurrent requests at most, per worker (empty: as many as the endpoint takes)').fill('4');
    await form.getByLabel('Order').selectOption('fifo');
    await form.getByRole('button', { name: 'Save' }).click();
    await machineCreated
      .getByText('At most 5 requests a second; one at a time, in order (FIFO); signed with Ed25519 (v1a)')
      .waitFor();
    const stored = await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated);
    expect(stored).toMatchObject({ rateLimitPerSecond: 5, signature: 'ed25519', ordering: 'fifo', maxConcurrency: 4 });
    // The public key the API answers is on the card, with its key id.
    const shownKey =
      (await machineCreated.locator('dd', { hasText: 'Key id' }).locator('code').first().textContent()) ?? '';
    expect(shownKey).toMatch(/^whpk_[A-Za-z0-9+/]{43}=$/);
    expect(shownKey).toBe(stored!.signingKeys[0]!.publicKey);
    await machineCreated.getByText('Send rate').waitFor();
    await machineCreated.getByText(/^\d+ waiting/).waitFor();

    // Rotating shows the new key and the previous one with when it stops signing.
    await machineCreated.getByRole('button', { name: 'Rotate signing key' }).click();
    await machineCreated
      .getByRole('group', { name: 'Rotate signing key' })
      .getByRole('button', { name: 'Rotate signing key' })
      .click();
    await machineCreated.getByText('Previous public key').waitFor();
    expect(await machineCreated.getByText(shownKey).count()).toBe(1);
    // Two keys, the new one first, each under an opaque kid that names no webhook.
    const kids = (await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated))!.signingKeys.map((k) => k.kid);
    expect(kids).toHaveLength(2);
    for (const kid of kids) expect(kid).toMatch(/^[A-Za-z0-9_-]{22}$/);

    // A payload filter: a bad one is refused with the API's words, a dry run explains, and a saved one shows on the card.
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    const filterField = form.getByLabel('Payload filter (JSON; empty: every event of the type)');
    await filterField.fill('{"path": "status", "eq": "x"}');
    await form.getByRole('button', { name: 'Try on a sample event' }).click();
    await form.getByText(/filter\.path: must start with data/).waitFor();
    await filterField.fill('{"path": "data.status", "eq": "unavailable"}');
    await form.getByRole('button', { name: 'Try on a sample event' }).click();
    await form.getByText('✗ Does not match: this event would not be sent.').waitFor();
    await form.getByText('(found "available")').waitFor();
    await form.getByRole('button', { name: 'Save' }).click();
    await machineCreated.getByText('{"path":"data.status","eq":"unavailable"}').waitFor();
    expect((await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated))?.filter).toEqual({
      path: 'data.status',
      eq: 'unavailable',
    });
    // With a filter, the newest events are kept for the dry run: one ingested now is tried and explained.
    await w.ingest('EVENT_TYPE_MACHINE_CREATED', 1);
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    await form.getByRole('button', { name: 'Try on the newest event' }).click();
    await form.getByText('✗ Does not match: this event would not be sent.').waitFor();
    await form.getByRole('button', { name: 'Cancel' }).click();

    // Cleared again: empty means unlimited.
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    await form.getByLabel('Rate limit: requests per second at most (empty: unlimited)').fill('');
    await form.getByRole('button', { name: 'Save' }).click();
    await machineCreated
      .getByText('No rate limit; one at a time, in order (FIFO); signed with Ed25519 (v1a)')
      .waitFor();
    expect((await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated))?.rateLimitPerSecond).toBeUndefined();

    // An ordering key: shown only with FIFO; a bad path is refused with the API's words; a good one is on the card.
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    const keyField = form.getByLabel('Keep order per (a path into the event; empty: one order for all)');
    await keyField.fill('metadata.machine_id');
    await form.getByRole('button', { name: 'Save' }).click();
    await form
      .getByRole('alert')
      .getByText(/ordering_key: must start with data/)
      .waitFor();
    await keyField.fill('data.metadata.machine_id');
    await form.getByRole('button', { name: 'Save' }).click();
    await machineCreated
      .getByText(
        'No rate limit; one at a time per data.metadata.machine_id, in order (FIFO by key); signed with Ed25519 (v1a)',
      )
      .waitFor();
    expect(await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated)).toMatchObject({
      ordering: 'fifo',
      orderingKey: 'data.metadata.machine_id',
    });
    // Concurrent again: the key field goes, and the key with it.
    await machineCreated.getByRole('button', { name: 'Edit' }).click();
    expect(await keyField.inputValue()).toBe('data.metadata.machine_id');
    await form.getByLabel('Order', { exact: true }).selectOption('none');
    expect(await keyField.count()).toBe(0);
    await form.getByRole('button', { name: 'Save' }).click();
    await machineCreated.getByText(/^No rate limit; up to 4 at once per worker;/).waitFor();
    expect(await w.t.webhooks.get(VENDOR, w.webhooks.machineCreated)).toMatchObject({
      ordering: 'none',
      orderingKey: undefined,
    });
    expect(problems).toEqual([]);
  });

  it('manage: a webhook added without a secret shows the secret generated for it once and its card says the secret signs; pause and enable say what happens to deliveries', async () => {
    const { page, problems } = await open((await mint('manage')).url);
    await page.getByRole('heading', { name: 'Machine created' }).waitFor();
    await page.getByRole('button', { name: 'Add a webhook' }).click();
    const form = page.getByRole('form', { name: 'Add a webhook' });
    await form.getByLabel('Event type').selectOption('EVENT_TYPE_DEPLOYMENT_CREATED');
    await form.getByLabel('Callback URL').fill(`${w.good.base}/created`);
    await form.getByRole('button', { name: 'Add webhook' }).click();
    const shown = (await page.locator('.secret-new').textContent()) ?? '';
    expect(shown).toMatch(/^whsec_[A-Za-z0-9+/]{43}=$/);
    const stored = (await w.t.webhooks.list(VENDOR)).find(
      (webhook) => webhook.eventType === 'EVENT_TYPE_DEPLOYMENT_CREATED',
    );
    expect(stored?.secret).toBe(shown);
    const created = card(page, 'Deployment created');
    await created.getByText('No rate limit; concurrent; signed with the secret (HMAC)').waitFor();
    await page.getByRole('button', { name: 'I have stored it' }).click();
    expect(await page.content()).not.toContain(shown);

    // Paused and enabled from the card, which says what happens to deliveries meanwhile.
    await created.getByRole('button', { name: 'Pause' }).click();
    await page
      .getByText('Paused the Deployment created webhook: its deliveries wait, unsent, until you enable it.')
      .waitFor();
    await created
      .getByText(/deliveries wait, unsent and using none of their attempts, and go out as soon as it is enabled/)
      .waitFor();
    expect((await w.t.webhooks.getById(stored!.id))?.disabled?.reason).toBe('paused');
    await created.getByRole('button', { name: 'Enable' }).click();
    await page
      .getByText('Enabled the Deployment created webhook: the deliveries held while it was paused go out now.')
      .waitFor();
    expect((await w.t.webhooks.getById(stored!.id))?.disabled).toBeUndefined();
    expect(problems).toEqual([]);
  });
});
