import { createHmac, timingSafeEqual } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { describe, expect, it } from 'vitest';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';
import { verifyLegacySignature, verifyStandardWebhook } from '@hookline/verify';

const SECRET = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const OTHER = 'whsec_AAECAwQFBgcICQoLDA0ODw==';
const BODY = '{"version":"1.0","event_id":"e-1","event_type":"EVENT_TYPE_MACHINE_CREATED","data":{"n":"ü"}}';
const NOW = 1_735_787_045;

function signed(secrets: string[], timestampSec = NOW, body = BODY) {
  return signatureHeaders({ webhookId: 'e-1', timestampSec, body, secrets });
}

describe('verifyStandardWebhook', () => {
  it('accepts what Hookline signs, from a record, mixed-case names or a Headers object', () => {
    const headers = signed([SECRET]);
    expect(verifyStandardWebhook({ secret: SECRET, headers, body: BODY, nowSec: NOW })).toBe(true);
    const upper = Object.fromEntries(Object.entries(headers).map(([k, v]) => [k.toUpperCase(), v]));
    expect(verifyStandardWebhook({ secret: SECRET, headers: upper, body: BODY, nowSec: NOW })).toBe(true);
    expect(verifyStandardWebhook({ secret: SECRET, headers: new Headers(headers), body: BODY, nowSec: NOW })).toBe(
      true,
    );
    expect(verifyStandardWebhook({ secret: SECRET, headers, body: Buffer.from(BODY, 'utf8'), nowSec: NOW })).toBe(true);
    const nodeHeaders: IncomingHttpHeaders = { ...headers, 'set-cookie': ['a=b'] };
    expect(verifyStandardWebhook({ secret: SECRET, headers: nodeHeaders, body: BODY, nowSec: NOW })).toBe(true);
  });

  it('accepts a plain (non-whsec) secret', () => {
    const headers = signed(['plain-secret']);
    expect(verifyStandardWebhook({ secret: 'plain-secret', headers, body: BODY, nowSec: NOW })).toBe(true);
    expect(verifyStandardWebhook({ secret: 'plain-secreT', headers, body: BODY, nowSec: NOW })).toBe(false);
  });

  it('accepts either secret of a rotation, and only those', () => {
    const headers = signed([SECRET, OTHER]);
    expect(verifyStandardWebhook({ secret: SECRET, headers, body: BODY, nowSec: NOW })).toBe(true);
    expect(verifyStandardWebhook({ secret: OTHER, headers, body: BODY, nowSec: NOW })).toBe(true);
    expect(verifyStandardWebhook({ secret: 'whsec_AQECAwQFBgcICQoLDA0ODw==', headers, body: BODY, nowSec: NOW })).toBe(
      false,
    );
  });

  it('rejects another secret, a changed body, id or timestamp', () => {
    const headers = signed([SECRET]);
    expect(verifyStandardWebhook({ secret: OTHER, headers, body: BODY, nowSec: NOW })).toBe(false);
    expect(verifyStandardWebhook({ secret: SECRET, headers, body: `${BODY}\n`, nowSec: NOW })).toBe(false);
    expect(
      verifyStandardWebhook({ secret: SECRET, headers: { ...headers, 'webhook-id': 'e-2' }, body: BODY, nowSec: NOW }),
    ).toBe(false);
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-timestamp': String(NOW + 1) },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(false);
  });

  it('enforces the timestamp tolerance both ways (300 s by default)', () => {
    const at = (timestampSec: number, toleranceSec?: number) =>
      verifyStandardWebhook({
        secret: SECRET,
        headers: signed([SECRET], timestampSec),
        body: BODY,
        nowSec: NOW,
        toleranceSec,
      });
    expect(at(NOW - 300)).toBe(true);
    expect(at(NOW + 300)).toBe(true);
    expect(at(NOW - 301)).toBe(false);
    expect(at(NOW + 301)).toBe(false);
    expect(at(NOW - 10, 5)).toBe(false);
    expect(at(NOW - 10, 10)).toBe(true);
  });

  it('uses the system clock by default', () => {
    const nowSec = Math.floor(Date.now() / 1000);
    expect(verifyStandardWebhook({ secret: SECRET, headers: signed([SECRET], nowSec), body: BODY })).toBe(true);
    expect(verifyStandardWebhook({ secret: SECRET, headers: signed([SECRET], nowSec - 3600), body: BODY })).toBe(false);
  });

  it('ignores entries of other versions and malformed entries, and finds a valid one among them', () => {
    const headers = signed([SECRET]);
    const valid = headers['webhook-signature'] ?? '';
    const noise = ['v2,abc', 'v1,', 'v1,not-base64!', `v1a,${valid.slice(3)}`, `v1,${valid.slice(3, -2)}=`].join(' ');
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-signature': noise },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(false);
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-signature': `${noise} ${valid}` },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(true);
    // Node joins a repeated header with ", ".
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-signature': `v1,AAAA, ${valid}` },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(true);
  });

  it('rejects missing or malformed headers', () => {
    const headers = signed([SECRET]);
    const without = (name: string) => Object.fromEntries(Object.entries(headers).filter(([k]) => k !== name));
    for (const name of ['webhook-id', 'webhook-timestamp', 'webhook-signature']) {
      expect(verifyStandardWebhook({ secret: SECRET, headers: without(name), body: BODY, nowSec: NOW })).toBe(false);
    }
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-timestamp': '1e9' },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(false);
    expect(
      verifyStandardWebhook({
        secret: SECRET,
        headers: { ...headers, 'webhook-id': ['e-1', 'e-1'] },
        body: BODY,
        nowSec: NOW,
      }),
    ).toBe(false);
    expect(verifyStandardWebhook({ secret: SECRET, headers: signed([]), body: BODY, nowSec: NOW })).toBe(false);
  });
});

describe('verifyLegacySignature', () => {
  it('accepts what Hookline sends, keyed by the secret string even with a whsec_ prefix', () => {
    const header = signed([SECRET])['x-webhook-signature'];
    expect(verifyLegacySignature({ secret: SECRET, header, body: BODY })).toBe(true);
    expect(
      verifyLegacySignature({
        secret: SECRET,
        header: header?.toUpperCase().replace('SHA256=', 'sha256='),
        body: BODY,
      }),
    ).toBe(true);
    expect(verifyLegacySignature({ secret: SECRET, header: [header ?? ''], body: Buffer.from(BODY) })).toBe(true);
  });

  it('agrees with the ten-line createHmac check from the README', () => {
    const received = signed(['legacy-secret'])['x-webhook-signature'] ?? '';
    const expected = 'sha256=' + createHmac('sha256', 'legacy-secret').update(BODY).digest('hex');
    expect(received.length === expected.length && timingSafeEqual(Buffer.from(received), Buffer.from(expected))).toBe(
      true,
    );
    expect(verifyLegacySignature({ secret: 'legacy-secret', header: received, body: BODY })).toBe(true);
  });

  it('rejects another secret, another body and malformed headers', () => {
    const header = signed([SECRET])['x-webhook-signature'] ?? '';
    expect(verifyLegacySignature({ secret: OTHER, header, body: BODY })).toBe(false);
    expect(verifyLegacySignature({ secret: SECRET, header, body: `${BODY} ` })).toBe(false);
    for (const bad of [
      undefined,
      null,
      '',
      header.slice('sha256='.length),
      header.replace('sha256=', 'sha1='),
      header.slice(0, -2),
      `${header}00`,
      [header, header],
    ]) {
      expect(verifyLegacySignature({ secret: SECRET, header: bad, body: BODY })).toBe(false);
    }
  });
});
