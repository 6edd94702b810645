import { readFileSync } from 'node:fs';
import { afterAll, afterEach, beforeAll, describe, expect, inject, it } from 'vitest';
import type { ConnectionKind } from '../../src/delivery/outbound/connector.js';
import { parseEgressProxyUrl } from '../../src/config/egress-proxy-url.js';
import { HttpSender, type HttpSenderOptions } from '../../src/delivery/outbound/http-sender.js';
import { testApp } from '../helpers/app.js';
import { startHttpsReceiver } from '../helpers/https-receiver.js';
import { machineEvent } from '../helpers/events.js';
import { capturedLogs } from '../helpers/logs.js';
import { issueClientCertificate, issueServerCertificate, TEST_DOMAIN } from '../helpers/test-ca.js';
import { hasTinyproxy, startTinyproxy, type TestTinyproxy } from '../helpers/tinyproxy.js';
import { quiescent, waitFor } from '../helpers/wait.js';
import { startTestWorker } from '../helpers/worker.js';

const testCa = inject('testCa');
const RECEIVER = `receiver.${TEST_DOMAIN}`;

/** In CI tinyproxy must be there (.ci/run installs it); elsewhere its absence skips these tests. */
const tinyproxyHere = hasTinyproxy() || (process.env.CI ? false : undefined);
if (tinyproxyHere === false) throw new Error('the egress proxy tests need tinyproxy in CI (apt-get install tinyproxy)');

/** Every name resolves to 127.0.0.1, as a public receiver's name would to its address. */
const loopbackLookup = ((hostname: string, options: { all?: boolean }, callback: (...args: unknown[]) => void) => {
  asked.push(hostname);
  if (options.all) callback(null, [{ address: '127.0.0.1', family: 4 }]);
  else callback(null, '127.0.0.1', 4);
}) as unknown as HttpSenderOptions['lookup'];
const asked: string[] = [];

const httpsReceiver = (options: { requireClientCert?: boolean; idleMs?: number } = {}) =>
  startHttpsReceiver(testCa!, options);

/** The CONNECT targets in tinyproxy's log, in order. */
const connects = (proxy: TestTinyproxy) =>
  [...proxy.log().matchAll(/Request \(file descriptor \d+\): CONNECT (\S+)/g)].map((m) => m[1]);

describe.skipIf(testCa === undefined || tinyproxyHere === undefined)(
  'deliveries through the egress proxy (a real tinyproxy)',
  () => {
    let proxy: TestTinyproxy;
    const closers: (() => Promise<void>)[] = [];
    beforeAll(async () => {
      proxy = await startTinyproxy();
    });
    afterEach(async () => {
      for (const close of closers.splice(0)) await close();
    });
    afterAll(async () => {
      await proxy.stop();
    });

    function sender(options: Partial<HttpSenderOptions> = {}) {
      const kinds: ConnectionKind[] = [];
      const s = new HttpSender({
        allowPrivateTargets: true,
        connectTimeoutMs: 3_000,
        maxResponseBytes: 64 * 1024,
        snippetBytes: 1024,
        userAgent: 'hookline-test',
        lookup: loopbackLookup,
        extraCa: readFileSync(testCa!.caPath, 'utf8'),
        egressProxy: parseEgressProxyUrl(proxy.url),
        onConnected: (kind) => kinds.push(kind),
        ...options,
      });
      closers.push(() => s.close(0));
      return { s, kinds };
    }

    it('tunnels to the checked address, with SNI and Host the receiver’s name, and resumes TLS sessions through the tunnel', async () => {
      const receiver = await httpsReceiver({ idleMs: 100 });
      closers.push(receiver.close);
      const { s, kinds } = sender();
      const url = `https://${RECEIVER}:${receiver.port}/hook`;
      const first = await s.send({ url, headers: {}, body: '{}', timeoutMs: 5_000 });
      expect(first).toMatchObject({ kind: 'response', status: 200 });
      // The receiver closes the idle connection; the next delivery connects again and resumes.
      await quiescent(async () => undefined, 300);
      const second = await s.send({ url, headers: {}, body: '{}', timeoutMs: 5_000 });
      expect(second).toMatchObject({ kind: 'response', status: 200 });
      expect(receiver.seen.map((r) => [r.headers.host, r.servername])).toEqual([
        [`${RECEIVER}:${receiver.port}`, RECEIVER],
        [`${RECEIVER}:${receiver.port}`, RECEIVER],
      ]);
      expect(kinds).toEqual(['tls_full', 'tls_resumed']);
      const targets = connects(proxy).filter((target) => target?.endsWith(`:${receiver.port}`));
      expect(targets).toEqual([`127.0.0.1:${receiver.port}`, `127.0.0.1:${receiver.port}`]);
      expect(proxy.log()).not.toContain(RECEIVER);
      // The line the SSRF test below looks for is the one tinyproxy writes per client connection.
      expect(proxy.log()).toContain('Connect (file descriptor');
    });

    it('an HTTPS receiver at an IP literal, its certificate for that IP alone: verified against the IP through the tunnel, no SNI', async () => {
      // Named for 127.0.0.1 only: a check against any default name (Node's is localhost) fails.
      const certificate = issueServerCertificate(testCa!, 'ip-only receiver', 'IP:127.0.0.1');
      const receiver = await startHttpsReceiver(testCa!, { certificate });
      closers.push(receiver.close);
      const { s, kinds } = sender();
      const url = `https://127.0.0.1:${receiver.port}/hook`;
      const result = await s.send({ url, headers: {}, body: '{}', timeoutMs: 5_000 });
      expect(result).toMatchObject({ kind: 'response', status: 200 });
      expect(receiver.seen.map((r) => [r.headers.host, r.servername])).toEqual([[`127.0.0.1:${receiver.port}`, false]]);
      expect(kinds).toEqual(['tls_full']);
      expect(connects(proxy)).toContain(`127.0.0.1:${receiver.port}`);
      // And a name the certificate does not carry is still refused through the tunnel.
      const wrongName = await s.send({
        url: `https://${RECEIVER}:${receiver.port}/hook`,
        headers: {},
        body: '{}',
        timeoutMs: 5_000,
      });
      expect(wrongName).toMatchObject({ kind: 'error', errorClass: 'tls' });
      expect(receiver.seen).toHaveLength(1);
    });

    it('the SSRF guard decides before the proxy: a name resolving to a private address is blocked, and the proxy is never asked', async () => {
      const { s } = sender({ allowPrivateTargets: false });
      const before = proxy.log().length;
      const result = await s.send({ url: `https://${RECEIVER}:9/hook`, headers: {}, body: '{}', timeoutMs: 3_000 });
      expect(result).toMatchObject({ kind: 'error', errorClass: 'ssrf_blocked' });
      // Held for a while: no connection ever reaches the proxy.
      await quiescent(async () => proxy.log().length, 300);
      expect(proxy.log().slice(before)).not.toContain('Connect (file descriptor');
    });

    it('a proxy that refuses the tunnel fails the attempt as connect, its credentials in no message', async () => {
      const locked = await startTinyproxy({ basicAuth: { user: 'hookline', password: 'right-password' } });
      closers.push(() => locked.stop());
      const receiver = await httpsReceiver();
      closers.push(receiver.close);
      const wrong = new URL(locked.url);
      wrong.username = 'hookline';
      wrong.password = 'wrong-password';
      const { s } = sender({ egressProxy: parseEgressProxyUrl(wrong.href) });
      const result = await s.send({
        url: `https://${RECEIVER}:${receiver.port}/`,
        headers: {},
        body: '{}',
        timeoutMs: 3_000,
      });
      expect(result).toMatchObject({ kind: 'error', errorClass: 'connect' });
      expect(JSON.stringify(result)).not.toContain('wrong-password');
      const right = new URL(locked.url);
      right.username = 'hookline';
      right.password = 'right-password';
      const ok = await sender({ egressProxy: parseEgressProxyUrl(right.href) }).s.send({
        url: `https://${RECEIVER}:${receiver.port}/`,
        headers: {},
        body: '{}',
        timeoutMs: 3_000,
      });
      expect(ok).toMatchObject({ kind: 'response', status: 200 });
    });

    it('a proxy that is down fails the attempt as connect, saying so without its address; the worker’s warn line has it', async () => {
      const stopped = await startTinyproxy();
      await stopped.stop();
      const { port } = new URL(stopped.url);
      const told: { proxy: string; reason: string }[] = [];
      const { s } = sender({
        egressProxy: parseEgressProxyUrl(stopped.url),
        onEgressProxyUnreachable: (failure) => told.push(failure),
      });
      const result = await s.send({ url: `https://${RECEIVER}:9/hook`, headers: {}, body: '{}', timeoutMs: 3_000 });
      expect(result).toMatchObject({
        kind: 'error',
        errorClass: 'connect',
        message: "ERR_HOOKLINE_PROXY_UNREACHABLE: the installation's egress proxy is unreachable (ECONNREFUSED)",
      });
      expect(told).toEqual([{ proxy: `127.0.0.1:${port}`, reason: expect.stringContaining('ECONNREFUSED') as string }]);

      // Through a worker: the attempt the vendor reads names no address; the operator's log line does.
      const logs = capturedLogs();
      const t = await testApp();
      closers.push(() => t.close());
      const worker = await startTestWorker(t, { egressProxy: parseEgressProxyUrl(stopped.url), logger: logs.logger() });
      closers.unshift(() => worker.close());
      // An IP address: the worker resolves no name, and goes straight to the proxy.
      const { id, key } = await t.register('vendor-proxy-down', 'https://127.0.0.1:9/hook');
      await t.ingestor.ingest([machineEvent('vendor-proxy-down')], 'http');
      let attempt: { outcome: string; error: string } | undefined;
      await waitFor(
        async () => {
          const list = await t.app.inject({
            url: `/vendors/v1/webhooks/${id}/deliveries`,
            headers: { 'x-api-key': key },
          });
          const [delivery] = list.json<{ deliveries: { delivery_id: string; attempts: number }[] }>().deliveries;
          if (delivery === undefined || delivery.attempts === 0) return false;
          const one = await t.app.inject({
            url: `/vendors/v1/webhooks/${id}/deliveries/${delivery.delivery_id}`,
            headers: { 'x-api-key': key },
          });
          [attempt] = one.json<{ attempts: { outcome: string; error: string }[] }>().attempts;
          return attempt !== undefined;
        },
        10_000,
        'the failed attempt recorded',
      );
      expect(attempt).toMatchObject({ outcome: 'connect' });
      expect(attempt!.error).toContain("the installation's egress proxy is unreachable");
      expect(attempt!.error).not.toContain(port);
      const line = logs.lines.find((l) => l.event === 'delivery.egress_proxy_unreachable');
      expect(line).toMatchObject({ level: 40, proxy: `127.0.0.1:${port}`, attempts: 1 });
      expect(String(line!.err)).toContain('ECONNREFUSED');
    });

    it('a worker with HOOKLINE_EGRESS_PROXY sends the OAuth2 token request and the mutual-TLS delivery through it', async () => {
      const tokenServer = await startHttpsReceiver(testCa!, {
        answer: (_seen, res) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(JSON.stringify({ access_token: 'proxied-token', token_type: 'Bearer', expires_in: 600 }));
        },
      });
      closers.push(tokenServer.close);
      const tokenPort = tokenServer.port;
      const receiver = await httpsReceiver({ requireClientCert: true });
      closers.push(receiver.close);

      const t = await testApp();
      closers.push(() => t.close());
      const worker = await startTestWorker(t, { egressProxy: parseEgressProxyUrl(proxy.url) });
      closers.unshift(() => worker.close());
      const client = issueClientCertificate(testCa!, 'proxied-client');
      await t.register('vendor-proxy', `https://127.0.0.1:${receiver.port}/hook`, {
        auth: {
          type: 'oauth2_client_credentials',
          token_url: `https://127.0.0.1:${tokenPort}/token`,
          client_id: 'c',
          client_secret: 'client-secret',
        },
        tls_client_certificate: { cert_pem: client.cert, key_pem: client.key },
      });
      await t.ingestor.ingest([machineEvent('vendor-proxy')], 'http');
      await waitFor(() => receiver.seen.length >= 1, 10_000, 'the delivery through the proxy');
      expect(receiver.seen[0]).toMatchObject({ clientCn: 'proxied-client' });
      expect(receiver.seen[0]!.headers.authorization).toBe('Bearer proxied-token');
      expect(tokenServer.seen).toHaveLength(1);
      const targets = connects(proxy);
      expect(targets).toContain(`127.0.0.1:${tokenPort}`);
      expect(targets).toContain(`127.0.0.1:${receiver.port}`);
    });
  },
);
