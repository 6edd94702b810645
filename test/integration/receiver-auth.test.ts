import { createPrivateKey } from 'node:crypto';
import type { ServerResponse } from 'node:http';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import { testApp, type TestApp } from '../helpers/app.js';
import { machineEvent } from '../helpers/events.js';
import { startHttpsReceiver, type SeenRequest } from '../helpers/https-receiver.js';
import { capturedLogs } from '../helpers/logs.js';
import { TestReceiver } from '../helpers/receiver.js';
import { storedText } from '../helpers/redis-dump.js';
import { issueClientCertificate } from '../helpers/test-ca.js';
import { queuesDrained, waitFor } from '../helpers/wait.js';
import { startTestWorker, type TestWorker } from '../helpers/worker.js';

const testCa = inject('testCa');
const VENDOR = 'vendor-auth';

/** An HTTPS receiver of the run's CA (see https-receiver.ts). */
const httpsServer = (
  answer: (seen: SeenRequest, res: ServerResponse) => void,
  options: { requireClientCert?: boolean } = {},
) => startHttpsReceiver(testCa!, { ...options, answer });

const ok = (_seen: SeenRequest, res: ServerResponse) => res.writeHead(200).end('ok');

describe.skipIf(testCa === undefined)('receiver authentication: headers, auth, client certificates', () => {
  let t: TestApp;
  let worker: TestWorker;
  let key: string;
  const logs = capturedLogs();
  const closers: (() => Promise<void>)[] = [];

  beforeAll(async () => {
    t = await testApp({ retryScheduleMs: [0, 200, 200], logger: logs.logger() });
    key = await t.keyFor(['vendor'], VENDOR);
    worker = await startTestWorker(t, {
      logger: logs.logger(),
      breaker: { failureThreshold: 1_000, openMs: 200, openMsMax: 200 },
    });
  });
  afterEach(async () => {
    for (const close of closers.splice(0)) await close();
    // One webhook per event type and vendor: each test registers afresh.
    for (const webhook of await t.webhooks.list(VENDOR)) await t.webhooks.delete(VENDOR, webhook.id);
  });
  afterAll(async () => {
    await worker.close();
    await t.close();
  });

  const api = (method: 'GET' | 'POST' | 'PATCH', url: string, payload?: object, apiKey = key) =>
    t.app.inject({ method, url, headers: { 'x-api-key': apiKey }, ...(payload === undefined ? {} : { payload }) });

  async function register(callbackUrl: string, extra: object, apiKey = key): Promise<string> {
    const res = await api(
      'POST',
      '/vendors/v1/webhooks',
      { event_type: 'EVENT_TYPE_MACHINE_CREATED', callback_url: callbackUrl, ...extra },
      apiKey,
    );
    expect(res.statusCode, res.body).toBe(201);
    return res.json<{ webhook_id: string }>().webhook_id;
  }

  const refusal = async (body: object, method: 'POST' | 'PATCH' = 'POST', url = '/vendors/v1/webhooks') => {
    const res = await api(method, url, { event_type: 'EVENT_TYPE_MACHINE_CREATED', ...body });
    expect(res.statusCode, res.body).toBe(400);
    return res.json<{ error: string }>().error;
  };

  /** Every value under the engine's prefix: what "sealed at rest" is checked against. */
  const everythingStored = () => storedText(t.redis, `{${t.prefix}:*`);

  const deliveriesOf = async (webhookId: string) =>
    (await api('GET', `/vendors/v1/webhooks/${webhookId}/deliveries`)).json<{
      deliveries: { delivery_id: string; status: string; last_outcome: string }[];
    }>().deliveries;

  const attemptsOf = async (webhookId: string, deliveryId: string) =>
    (await api('GET', `/vendors/v1/webhooks/${webhookId}/deliveries/${deliveryId}`)).json<{
      attempts: { outcome: string; error: string | null; request_headers: Record<string, string> | null }[];
    }>().attempts;

  it('sends custom headers and basic auth; reads, the delivery log, logs and Redis never show their values', async () => {
    const receiver = new TestReceiver();
    await receiver.start();
    closers.push(() => receiver.close());
    const id = await register(`${receiver.base}/hook`, {
      headers: { 'X-Api-Key': 'header-value-0123456789', 'X-Tenant': 'tenant-value-abcdef' },
      auth: { type: 'basic', username: 'hookline', password: 'basic-password-987654' },
    });

    const read = (await api('GET', `/vendors/v1/webhooks/${id}`)).json<Record<string, unknown>>();
    expect(read.headers).toEqual({ 'X-Api-Key': '••••', 'X-Tenant': '••••' });
    expect(read.auth).toEqual({ type: 'basic', username: 'hookline' });
    expect(read.tls_client_certificate).toBeNull();

    await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
    await waitFor(() => receiver.requests.length >= 1, 10_000, 'the delivery');
    const [request] = receiver.requests;
    expect(request!.headers['x-api-key']).toBe('header-value-0123456789');
    expect(request!.headers['x-tenant']).toBe('tenant-value-abcdef');
    expect(request!.headers.authorization).toBe(
      `Basic ${Buffer.from('hookline:basic-password-987654').toString('base64')}`,
    );
    expect(request!.headers['webhook-signature']).toMatch(/^v1,/);

    let delivery: { delivery_id: string; status: string } | undefined;
    await waitFor(
      async () => ([delivery] = await deliveriesOf(id)) && delivery?.status === 'delivered',
      10_000,
      'the delivery recorded',
    );
    const [attempt] = await attemptsOf(id, delivery!.delivery_id);
    expect(attempt!.request_headers).toMatchObject({
      'X-Api-Key': '••••',
      'X-Tenant': '••••',
      authorization: 'Basic ••••',
    });

    const list = (await api('GET', '/vendors/v1/webhooks')).body;
    const everything = [
      list,
      JSON.stringify(read),
      JSON.stringify(attempt),
      JSON.stringify(logs.lines),
      await everythingStored(),
    ];
    for (const secret of ['header-value-0123456789', 'tenant-value-abcdef', 'basic-password-987654'])
      for (const place of everything) expect(place).not.toContain(secret);
  });

  it('refuses header names the engine sends, too many headers and bad values, naming the problem', async () => {
    const url = 'https://receiver.example/hook';
    for (const name of ['webhook-id', 'X-Webhook-Signature', 'Host', 'content-type', 'Content-Length', 'User-Agent'])
      expect(await refusal({ callback_url: url, headers: { [name]: 'x' } })).toContain(`"${name}"`);
    expect(
      await refusal({
        callback_url: url,
        headers: { Authorization: 'ApiKey 1' },
        auth: { type: 'bearer', token: 'tok' },
      }),
    ).toContain('"Authorization"');
    const eleven = Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`X-H${i}`, 'v']));
    expect(await refusal({ callback_url: url, headers: eleven })).toContain('at most 10');
    expect(await refusal({ callback_url: url, headers: { 'X-A': 'line\r\nX-Injected: 1' } })).toContain(
      'printable ASCII',
    );
    expect(await refusal({ callback_url: url, headers: { 'X-A': 'v', 'x-a': 'w' } })).toContain('twice');
    expect(await refusal({ callback_url: url, headers: { 'Bad Name': 'v' } })).toContain('token characters');
    // An Authorization header of its own is allowed while there is no auth.
    await register(url, { headers: { Authorization: 'ApiKey 1' } });
  });

  it('merges headers on PATCH (case-insensitive names, null removes one), keeps the limit and the auth clash', async () => {
    const id = await register('https://receiver.example/hook', { headers: { 'X-One': '1', 'X-Two': '2' } });
    const patch = (body: object) => api('PATCH', `/vendors/v1/webhooks/${id}`, body);
    let res = await patch({ headers: { 'x-one': 'new', 'X-Two': null, 'X-Three': '3' } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json<{ headers: object }>().headers).toEqual({ 'x-one': '••••', 'X-Three': '••••' });
    const stored = await t.webhooks.get(VENDOR, id);
    expect(stored!.headers).toEqual([
      { name: 'x-one', value: 'new' },
      { name: 'X-Three', value: '3' },
    ]);
    const nine = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`X-More${i}`, 'v']));
    res = await patch({ headers: nine });
    expect(res.statusCode).toBe(400);
    expect(res.json<{ error: string }>().error).toContain('at most 10');
    res = await patch({ headers: { Authorization: 'ApiKey 2' } });
    expect(res.statusCode).toBe(200);
    res = await patch({ auth: { type: 'bearer', token: 'abc' } });
    expect(res.statusCode).toBe(400);
    expect(res.json<{ error: string }>().error).toContain('"Authorization"');
    res = await patch({ headers: null, auth: { type: 'bearer', token: 'abc' } });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ headers: {}, auth: { type: 'bearer' } });
    res = await patch({ auth: null });
    expect(res.json()).toMatchObject({ auth: null });
  });

  it('a callback_url moved to another origin needs its headers and auth again (409 otherwise, nothing changed); a new path keeps them', async () => {
    const first = new TestReceiver();
    const second = new TestReceiver();
    await first.start();
    await second.start();
    closers.push(
      () => first.close(),
      () => second.close(),
    );
    const id = await register(`${first.base}/hook`, {
      headers: { 'X-Api-Key': 'old-gateway-key-1234', 'X-Tenant': 'old-tenant-5678' },
      auth: { type: 'basic', username: 'hookline', password: 'old-password-9012' },
    });
    const patch = (body: object) => api('PATCH', `/vendors/v1/webhooks/${id}`, body);

    // The second receiver listens on another port of 127.0.0.1: another origin.
    let res = await patch({ callback_url: `${second.base}/hook`, headers: { 'X-Api-Key': 'new-gateway-key-1234' } });
    expect(res.statusCode, res.body).toBe(409);
    expect(res.json()).toMatchObject({ code: 'credentials_not_restated' });
    const { error } = res.json<{ error: string }>();
    expect(error).toContain('headers "X-Tenant" (their values) and auth');
    expect(error).not.toContain('X-Api-Key');
    const unchanged = await t.webhooks.get(VENDOR, id);
    expect(unchanged!.callbackUrl).toBe(`${first.base}/hook`);
    expect(unchanged!.headers[0]).toEqual({ name: 'X-Api-Key', value: 'old-gateway-key-1234' });

    // The same origin, another path and a query: the credentials stay.
    res = await patch({ callback_url: `${first.base}/moved?v=2` });
    expect(res.statusCode, res.body).toBe(200);

    // Restated (one header given again, one dropped, auth given again): moved, and the new host gets the new values only.
    res = await patch({
      callback_url: `${second.base}/hook`,
      headers: { 'x-api-key': 'new-gateway-key-1234', 'X-Tenant': null },
      auth: { type: 'bearer', token: 'new-bearer-token-3456' },
    });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ headers: { 'x-api-key': '••••' }, auth: { type: 'bearer' } });
    await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
    await waitFor(() => second.requests.length >= 1, 10_000, 'the delivery to the new origin');
    const headers = second.requests[0]!.headers;
    expect(headers['x-api-key']).toBe('new-gateway-key-1234');
    expect(headers.authorization).toBe('Bearer new-bearer-token-3456');
    expect(JSON.stringify(headers)).not.toMatch(/old-(gateway-key|tenant|password)/);
    expect(first.requests).toHaveLength(0);

    // Dropped with null: moved back without them.
    res = await patch({ callback_url: `${first.base}/hook`, headers: null, auth: null });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ headers: {}, auth: null });
  });

  it('refuses bad auth: a colon in a basic username, a token URL that is not https, unknown fields', async () => {
    const url = 'https://receiver.example/hook';
    expect(await refusal({ callback_url: url, auth: { type: 'basic', username: 'a:b', password: 'p' } })).toContain(
      'RFC 7617',
    );
    const oauth = { type: 'oauth2_client_credentials', client_id: 'c', client_secret: 's' };
    expect(await refusal({ callback_url: url, auth: { ...oauth, token_url: 'http://tokens.example/t' } })).toContain(
      'https',
    );
    // Stored and shown as it is: no credentials or secrets in it.
    expect(
      await refusal({ callback_url: url, auth: { ...oauth, token_url: 'https://client:pw-in-url@tokens.example/t' } }),
    ).toContain('auth.token_url must not contain credentials');
    expect(
      await refusal({
        callback_url: url,
        auth: { ...oauth, token_url: 'https://tokens.example/t?tenant=a&client_secret=in-query' },
      }),
    ).toContain('auth.token_url must not carry secrets in its query ("client_secret")');
    const id = await register(url, { auth: { ...oauth, token_url: 'https://tokens.example/t?tenant=a&p=policy' } });
    const patched = await api('PATCH', `/vendors/v1/webhooks/${id}`, {
      auth: { ...oauth, token_url: 'https://tokens.example/t?api_key=k' },
    });
    expect(patched.statusCode).toBe(400);
    expect(patched.json<{ error: string }>().error).toContain('("api_key")');
    expect(await refusal({ callback_url: url, auth: { type: 'bearer', token: 't', extra: 1 } })).toContain(
      '"auth.extra"',
    );
    expect(await refusal({ callback_url: url, auth: { type: 'digest' } })).toContain('auth.type');
  });

  it('refuses a token URL on a private address under the SSRF guard', async () => {
    const guarded = await testApp({ allowPrivateTargets: false });
    closers.push(() => guarded.close());
    const guardedKey = await guarded.keyFor(['vendor'], VENDOR);
    const res = await guarded.app.inject({
      method: 'POST',
      url: '/vendors/v1/webhooks',
      headers: { 'x-api-key': guardedKey },
      payload: {
        event_type: 'EVENT_TYPE_MACHINE_CREATED',
        callback_url: 'https://receiver.example/hook',
        auth: {
          type: 'oauth2_client_credentials',
          token_url: 'https://169.254.169.254/token',
          client_id: 'c',
          client_secret: 's',
        },
      },
    });
    expect(res.statusCode).toBe(400);
    expect(res.json<{ error: string }>().error).toContain('auth.token_url');
  });

  it('checks client certificates: shown by subject, fingerprint and expiry; a wrong key, an expired one, http and garbage refused', async () => {
    const good = issueClientCertificate(testCa!, 'vendor-a-client');
    const other = issueClientCertificate(testCa!, 'someone-else');
    const expired = issueClientCertificate(testCa!, 'old-client', { expired: true });
    const url = 'https://receiver.example/hook';
    const cert = (c: { cert: string; key: string }) => ({
      tls_client_certificate: { cert_pem: c.cert, key_pem: c.key },
    });

    expect(
      await refusal({ callback_url: url, tls_client_certificate: { cert_pem: good.cert, key_pem: other.key } }),
    ).toContain('does not match');
    expect(await refusal({ callback_url: url, ...cert(expired) })).toContain('expired at 2020-01-02T00:00:00.000Z');
    expect(await refusal({ callback_url: 'http://receiver.example/hook', ...cert(good) })).toContain('https');
    expect(
      await refusal({ callback_url: url, tls_client_certificate: { cert_pem: 'nope', key_pem: good.key } }),
    ).toContain('PEM certificate');
    const encrypted = createPrivateKey(good.key)
      .export({ format: 'pem', type: 'pkcs8', cipher: 'aes-256-cbc', passphrase: 'pw' })
      .toString();
    expect(
      await refusal({ callback_url: url, tls_client_certificate: { cert_pem: good.cert, key_pem: encrypted } }),
    ).toContain('unencrypted');

    const id = await register(url, cert(good));
    const read = (await api('GET', `/vendors/v1/webhooks/${id}`)).json<{
      tls_client_certificate: { subject: string; issuer: string; fingerprint_sha256: string; not_after: string };
    }>();
    expect(read.tls_client_certificate.subject).toBe('CN=vendor-a-client, O=Hookline Tests');
    expect(read.tls_client_certificate.issuer).toBe('CN=Hookline Test CA');
    expect(read.tls_client_certificate.fingerprint_sha256).toMatch(/^([0-9A-F]{2}:){31}[0-9A-F]{2}$/);
    expect(Date.parse(read.tls_client_certificate.not_after)).toBeGreaterThan(Date.now());
    // The key is sealed: nowhere in Redis in the clear.
    const keyBody = good.key.split('\n').slice(1, -2).join('');
    expect(await everythingStored()).not.toContain(keyBody.slice(0, 40));
    // A callback URL turned to http while a certificate is set is refused too.
    let res = await api('PATCH', `/vendors/v1/webhooks/${id}`, { callback_url: 'http://receiver.example/hook' });
    expect(res.statusCode).toBe(400);
    // Another https host keeps it: its key is never sent, so there is nothing to restate.
    res = await api('PATCH', `/vendors/v1/webhooks/${id}`, { callback_url: 'https://elsewhere.example/hook' });
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json()).toMatchObject({ tls_client_certificate: { subject: 'CN=vendor-a-client, O=Hookline Tests' } });
    expect((await api('PATCH', `/vendors/v1/webhooks/${id}`, { tls_client_certificate: null })).json()).toMatchObject({
      tls_client_certificate: null,
    });
  });

  it('presents each webhook’s client certificate to a mutual-TLS receiver; two vendors on one host each get their own', async () => {
    const receiver = await httpsServer(ok, { requireClientCert: true });
    closers.push(receiver.close);
    const otherVendor = 'vendor-auth-2';
    const otherKey = await t.keyFor(['vendor'], otherVendor);
    closers.push(async () => {
      for (const webhook of await t.webhooks.list(otherVendor)) await t.webhooks.delete(otherVendor, webhook.id);
    });
    const a = issueClientCertificate(testCa!, 'client-a');
    const b = issueClientCertificate(testCa!, 'client-b');
    await register(`${receiver.base}/a`, { tls_client_certificate: { cert_pem: a.cert, key_pem: a.key } });
    await register(`${receiver.base}/b`, { tls_client_certificate: { cert_pem: b.cert, key_pem: b.key } }, otherKey);

    const events = Array.from({ length: 6 }, (_, i) => machineEvent(i % 2 === 0 ? VENDOR : otherVendor));
    await t.ingestor.ingest(events, 'http');
    await waitFor(() => receiver.seen.length >= 6, 10_000, 'six deliveries over mutual TLS');
    await queuesDrained(t.queues, 10_000);
    expect(receiver.seen.filter((s) => s.path === '/a').map((s) => s.clientCn)).toEqual([
      'client-a',
      'client-a',
      'client-a',
    ]);
    expect(receiver.seen.filter((s) => s.path === '/b').map((s) => s.clientCn)).toEqual([
      'client-b',
      'client-b',
      'client-b',
    ]);
  });

  it('a mutual-TLS receiver refuses a webhook without a certificate: the attempt fails and is retried', async () => {
    const receiver = await httpsServer(ok, { requireClientCert: true });
    closers.push(receiver.close);
    const id = await register(`${receiver.base}/none`, {});
    await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
    let outcome = '';
    await waitFor(
      async () => {
        outcome = (await deliveriesOf(id))[0]?.last_outcome ?? '';
        return outcome !== '' && outcome !== 'pending';
      },
      10_000,
      'a failed attempt',
    );
    expect(['tls', 'network', 'connect']).toContain(outcome);
    expect(receiver.seen).toHaveLength(0);
  });

  describe('oauth2_client_credentials', () => {
    /** A token endpoint: counts requests, checks the client, issues `tok-<n>` tokens. */
    async function tokenEndpoint(options: { refuse?: boolean; expiresIn?: number; echo?: boolean } = {}) {
      let issued = 0;
      const requests: SeenRequest[] = [];
      const server = await httpsServer((seen, res) => {
        requests.push(seen);
        const form = new URLSearchParams(seen.body);
        const basic = seen.headers.authorization?.replace(/^Basic /, '');
        const [client, clientSecret] =
          basic === undefined
            ? [form.get('client_id'), form.get('client_secret')]
            : Buffer.from(basic, 'base64').toString('utf8').split(':');
        if (
          options.refuse ||
          form.get('grant_type') !== 'client_credentials' ||
          decodeURIComponent(client ?? '') !== 'hookline-client' ||
          decodeURIComponent(clientSecret ?? '') !== 'client-secret-5555'
        ) {
          // `echo`: an endpoint that quotes the request it refused, credentials and all.
          const description = options.echo
            ? `Client authentication failed for ${seen.headers.authorization ?? ''} with ${seen.body}`
            : 'Client authentication failed';
          res.writeHead(401, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ error: 'invalid_client', error_description: description }));
          return;
        }
        issued += 1;
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            access_token: `tok-${issued}`,
            token_type: 'Bearer',
            expires_in: options.expiresIn ?? 3600,
          }),
        );
      });
      closers.push(server.close);
      return { ...server, requests, issued: () => issued };
    }

    /** A receiver that accepts only the bearer tokens in `valid`. */
    async function bearerReceiver(valid: Set<string>) {
      const server = await httpsServer((seen, res) => {
        const token = seen.headers.authorization?.replace(/^Bearer /, '') ?? '';
        res.writeHead(valid.has(token) ? 200 : 401).end();
      });
      closers.push(server.close);
      return server;
    }

    const oauth = (tokenUrl: string, extra: object = {}) => ({
      auth: {
        type: 'oauth2_client_credentials',
        token_url: `${tokenUrl}/oauth/token`,
        client_id: 'hookline-client',
        client_secret: 'client-secret-5555',
        scope: 'webhooks:write',
        ...extra,
      },
    });

    it('fetches one token, shares it with a second worker, and fetches again once when the receiver answers 401', async () => {
      const tokens = await tokenEndpoint();
      const valid = new Set(['tok-1']);
      const receiver = await bearerReceiver(valid);
      const id = await register(`${receiver.base}/hook`, oauth(tokens.base));
      expect((await api('GET', `/vendors/v1/webhooks/${id}`)).json<{ auth: object }>().auth).toEqual({
        type: 'oauth2_client_credentials',
        token_url: `${tokens.base}/oauth/token`,
        client_id: 'hookline-client',
        scope: 'webhooks:write',
        token_auth_method: 'client_secret_basic',
      });

      await t.ingestor.ingest(
        Array.from({ length: 5 }, () => machineEvent(VENDOR)),
        'http',
      );
      await waitFor(() => receiver.seen.length >= 5, 10_000, 'five deliveries');
      expect(tokens.requests).toHaveLength(1);
      expect(new URLSearchParams(tokens.requests[0]!.body).get('scope')).toBe('webhooks:write');

      const second = await startTestWorker(t, { logger: logs.logger() });
      closers.push(() => second.close());
      await t.ingestor.ingest(
        Array.from({ length: 10 }, () => machineEvent(VENDOR)),
        'http',
      );
      await waitFor(() => receiver.seen.length >= 15, 10_000, 'ten more deliveries over two workers');
      expect(tokens.requests).toHaveLength(1);

      // The receiver rotates its keys: tok-1 is refused, and a new token is fetched once.
      valid.clear();
      valid.add('tok-2');
      await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
      await waitFor(() => receiver.seen.some((s) => s.headers.authorization === 'Bearer tok-2'), 10_000, 'tok-2 used');
      await queuesDrained(t.queues, 10_000);
      expect(tokens.requests).toHaveLength(2);
      const deliveries = await deliveriesOf(id);
      expect(deliveries.every((d) => d.status === 'delivered')).toBe(true);
      const metrics = await worker.metricsText();
      expect(metrics).toMatch(/hookline_receiver_token_requests_total\{outcome="ok",role="worker"\} [12]/);
      for (const place of [JSON.stringify(logs.lines), await everythingStored(), metrics])
        for (const secret of ['client-secret-5555', 'tok-1', 'tok-2']) expect(place).not.toContain(secret);
    });

    it('sends the client in the body with client_secret_post', async () => {
      const tokens = await tokenEndpoint();
      const receiver = await bearerReceiver(new Set(['tok-1']));
      const id = await register(
        `${receiver.base}/hook`,
        oauth(tokens.base, { token_auth_method: 'client_secret_post' }),
      );
      await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
      await waitFor(() => receiver.seen.length >= 1, 10_000, 'the delivery');
      expect(receiver.seen[0]!.headers.authorization).toBe('Bearer tok-1');
      let delivery: { delivery_id: string; status: string } | undefined;
      await waitFor(
        async () => ([delivery] = await deliveriesOf(id)) && delivery?.status === 'delivered',
        10_000,
        'the delivery recorded',
      );
      // The token went with the request, so the attempt shows its scheme.
      expect((await attemptsOf(id, delivery!.delivery_id))[0]!.request_headers).toMatchObject({
        authorization: 'Bearer ••••',
      });
      const form = new URLSearchParams(tokens.requests[0]!.body);
      expect(form.get('client_id')).toBe('hookline-client');
      expect(tokens.requests[0]!.headers.authorization).toBeUndefined();
    });

    it('a token endpoint that refuses the client: the attempt is `auth`, not sent, its error says why without the secret', async () => {
      const tokens = await tokenEndpoint({ refuse: true });
      const receiver = await bearerReceiver(new Set());
      const id = await register(`${receiver.base}/hook`, oauth(tokens.base));
      await t.ingestor.ingest([machineEvent(VENDOR)], 'http');
      let delivery: { delivery_id: string; last_outcome: string } | undefined;
      await waitFor(
        async () => ([delivery] = await deliveriesOf(id)) && delivery?.last_outcome === 'auth',
        10_000,
        'an auth failure',
      );
      const [attempt] = await attemptsOf(id, delivery!.delivery_id);
      expect(attempt!.error).toContain('answered 401 (invalid_client: Client authentication failed)');
      expect(attempt!.error).not.toContain('client-secret-5555');
      expect(receiver.seen).toHaveLength(0);
      // Nothing was sent, so no request headers are shown (no `authorization: Bearer ••••` that never went).
      expect(attempt!.request_headers).toBeNull();
    });

    it('a token endpoint that echoes the request it refused: its text reaches the delivery log, the logs and Redis redacted', async () => {
      for (const [method, event] of [
        ['client_secret_basic', 'EVENT_TYPE_MACHINE_CREATED'],
        ['client_secret_post', 'EVENT_TYPE_MACHINE_UPDATED'],
      ] as const) {
        const tokens = await tokenEndpoint({ refuse: true, echo: true });
        const receiver = await bearerReceiver(new Set());
        const res = await api('POST', '/vendors/v1/webhooks', {
          event_type: event,
          callback_url: `${receiver.base}/hook`,
          headers: { 'X-Api-Key': 'gateway-key-echo-7777' },
          ...oauth(tokens.base, { token_auth_method: method, client_secret: 'client-secret-5555&echo' }),
        });
        expect(res.statusCode, res.body).toBe(201);
        const id = res.json<{ webhook_id: string }>().webhook_id;
        await t.ingestor.ingest([{ ...machineEvent(VENDOR), event_type: event }], 'http');
        let delivery: { delivery_id: string; last_outcome: string } | undefined;
        await waitFor(
          async () => ([delivery] = await deliveriesOf(id)) && delivery?.last_outcome === 'auth',
          10_000,
          `an auth failure (${method})`,
        );
        const [attempt] = await attemptsOf(id, delivery!.delivery_id);
        expect(attempt!.error, method).toContain('Client authentication failed for ');
        expect(attempt!.error).toContain('••••');
        const basic = Buffer.from('hookline-client:client-secret-5555%26echo').toString('base64');
        const places = [JSON.stringify(attempt), JSON.stringify(logs.lines), await everythingStored()];
        for (const place of places)
          for (const secret of ['client-secret-5555', basic.slice(0, 20)]) expect(place, method).not.toContain(secret);
        // The endpoint did get the secret: what was redacted was really there.
        expect(JSON.stringify(tokens.requests)).toMatch(
          method === 'client_secret_post' ? /client-secret-5555/ : /Basic /,
        );
      }
    });
  });
});
