#!/usr/bin/env node
// A webhook receiver for trying Hookline out: no dependencies, only node:http and node:crypto.
//
//   WEBHOOK_SECRET=s3cret node receiver.mjs
//
// It verifies `webhook-signature` (Standard Webhooks) and `x-webhook-signature` (the legacy
// scheme), rejects a `webhook-timestamp` more than 5 minutes off, answers 204 when the request
// checks out and 401 when it does not, and logs one line per request with both results. Without
// WEBHOOK_SECRET it checks nothing and accepts everything (verified=unchecked).
//
// Environment: PORT (default 9000; 0 picks a free one), WEBHOOK_SECRET, and FAIL_RATE (0-1, default
// 0): the share of requests answered 503 instead, to watch Hookline retry.
import { Buffer } from 'node:buffer';
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer } from 'node:http';
import process from 'node:process';

const log = (line) => process.stdout.write(`${line}\n`);

const SECRET = process.env.WEBHOOK_SECRET ?? '';
const PORT = Number(process.env.PORT ?? 9000);
const FAIL_RATE = Number(process.env.FAIL_RATE ?? 0);
const TOLERANCE_S = 5 * 60;
const MAX_BODY_BYTES = 1024 * 1024;

/** The HMAC key: the base64-decoded rest of a `whsec_` secret, else the secret's UTF-8 bytes. */
function signingKey(secret) {
  return secret.startsWith('whsec_')
    ? Buffer.from(secret.slice('whsec_'.length), 'base64')
    : Buffer.from(secret, 'utf8');
}

function sameBytes(a, b) {
  return a.length === b.length && timingSafeEqual(a, b);
}

/** Standard Webhooks: `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`; any of a space-separated list may match. */
function verifyStandard(headers, body) {
  const id = headers['webhook-id'];
  const timestamp = headers['webhook-timestamp'];
  const signatures = headers['webhook-signature'];
  if (signatures === undefined) return 'absent';
  if (!id || !timestamp) return 'no';
  const expected = createHmac('sha256', signingKey(SECRET)).update(`${id}.${timestamp}.`).update(body).digest();
  const ok = signatures
    .split(/[\s,]+(?=v\d+,)/)
    .filter((entry) => entry.startsWith('v1,'))
    .some((entry) => sameBytes(Buffer.from(entry.slice('v1,'.length), 'base64'), expected));
  return ok ? 'yes' : 'no';
}

/** Legacy: `sha256=<hex HMAC-SHA256(secret as UTF-8, body)>`. */
function verifyLegacy(header, body) {
  if (header === undefined) return 'absent';
  const expected = Buffer.from(
    `sha256=${createHmac('sha256', Buffer.from(SECRET, 'utf8')).update(body).digest('hex')}`,
  );
  return sameBytes(Buffer.from(header), expected) ? 'yes' : 'no';
}

/**
 * Checks a request: `{ ok, detail }`. The Standard Webhooks signature decides when it is present
 * (during a secret rotation it carries both secrets, while the legacy header carries only the
 * previous one until the overlap ends); a request with only the legacy header is judged by that. A `webhook-timestamp` more than
 * 5 minutes off fails either way.
 */
function verify(headers, body) {
  const standard = verifyStandard(headers, body);
  const legacy = verifyLegacy(headers['x-webhook-signature'], body);
  const detail = `standard=${standard} legacy=${legacy}`;
  const timestamp = headers['webhook-timestamp'];
  if (
    timestamp !== undefined &&
    (!/^\d+$/.test(timestamp) || Math.abs(Date.now() / 1000 - Number(timestamp)) > TOLERANCE_S)
  ) {
    return { ok: false, detail: `${detail}, webhook-timestamp more than 5 minutes off` };
  }
  if (standard === 'absent' && legacy === 'absent') return { ok: false, detail: 'no signature header' };
  return { ok: standard === 'yes' || (standard === 'absent' && legacy === 'yes'), detail };
}

const server = createServer((request, response) => {
  if (request.method === 'GET' && request.url === '/healthz')
    return void response.writeHead(200, { 'content-type': 'text/plain' }).end('ok\n');
  if (request.method !== 'POST') return void response.writeHead(405, { allow: 'POST' }).end();

  const chunks = [];
  let size = 0;
  request.on('data', (chunk) => {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) {
      response.writeHead(413).end();
      request.destroy();
    } else chunks.push(chunk);
  });
  request.on('end', () => {
    // Verify the raw bytes, before parsing anything.
    const body = Buffer.concat(chunks);
    const h = request.headers;
    const check = SECRET ? verify(h, body) : { ok: true, detail: 'WEBHOOK_SECRET unset' };
    const verified = SECRET ? (check.ok ? 'yes' : 'no') : 'unchecked';
    let type = h['x-webhook-event'] ?? '-';
    if (type === '-') {
      try {
        type = JSON.parse(body.toString('utf8')).event_type ?? '-';
      } catch {
        // Not JSON: the log line says '-'.
      }
    }
    const fail = check.ok && FAIL_RATE > 0 && Math.random() < FAIL_RATE;
    const status = check.ok ? (fail ? 503 : 204) : 401;
    log(
      `${new Date().toISOString()} ${request.method} ${request.url} event=${h['webhook-id'] ?? '-'} type=${type} attempt=${h['x-webhook-attempt'] ?? '-'} ` +
        `verified=${verified} (${check.detail}) status=${status}${fail ? ' (FAIL_RATE)' : ''}`,
    );
    response.writeHead(status).end();
  });
});

server.listen(PORT, () => {
  log(
    `demo receiver listening on :${server.address().port}${SECRET ? '' : ' (WEBHOOK_SECRET unset: signatures are not checked)'}`,
  );
});

for (const signal of ['SIGINT', 'SIGTERM']) process.once(signal, () => server.close(() => process.exit(0)));
