import { createHmac } from 'node:crypto';
import { Webhook } from 'standardwebhooks';
import { describe, expect, it } from 'vitest';
import { secretKeyBytes } from '@hookline/verify';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';

const WHSEC = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const BODY =
  '{"version":"1.0","event_id":"0b8f5d8e-2f59-4a57-9a7e-3c2c7d1f6b10","event_type":"EVENT_TYPE_MACHINE_CREATED","timestamp":"2025-01-02T03:04:05.000Z","data":{"name":"größe ✓"}}';
const ID = '0b8f5d8e-2f59-4a57-9a7e-3c2c7d1f6b10';

/** Independent reference: base64 HMAC-SHA256 of `{id}.{ts}.{body}` with the given key bytes. */
function reference(key: Buffer, id: string, ts: number, body: string): string {
  return createHmac('sha256', key).update(`${id}.${ts}.${body}`).digest('base64');
}

describe('secretKeyBytes', () => {
  it('decodes the base64 after whsec_', () => {
    expect(secretKeyBytes('whsec_AAECAwQFBgcICQoLDA0ODw==')).toEqual(Buffer.from([...Array(16).keys()]));
  });

  it('takes any other secret as its UTF-8 bytes', () => {
    expect(secretKeyBytes('s3cret-ü')).toEqual(Buffer.from([0x73, 0x33, 0x63, 0x72, 0x65, 0x74, 0x2d, 0xc3, 0xbc]));
    // Only the exact prefix counts.
    expect(secretKeyBytes('WHSEC_abc')).toEqual(Buffer.from('WHSEC_abc', 'utf8'));
  });
});

describe('signatureHeaders', () => {
  it('matches the published Standard Webhooks example vector', () => {
    const headers = signatureHeaders({
      webhookId: 'msg_p5jXN8AQM9LWM0D4loKWxJek',
      timestampSec: 1614265330,
      body: '{"test": 2432232314}',
      secrets: [WHSEC],
    });
    expect(headers['webhook-signature']).toBe('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
  });

  it('signs a whsec_ secret with the decoded key, as an independent HMAC computes it', () => {
    const headers = signatureHeaders({ webhookId: ID, timestampSec: 1_735_787_045, body: BODY, secrets: [WHSEC] });
    const key = Buffer.from('MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'base64');
    expect(headers).toEqual({
      'webhook-id': ID,
      'webhook-timestamp': '1735787045',
      'webhook-signature': `v1,${reference(key, ID, 1_735_787_045, BODY)}`,
      'x-webhook-signature': `sha256=${createHmac('sha256', WHSEC).update(BODY).digest('hex')}`,
    });
  });

  it('signs a plain secret with its UTF-8 bytes', () => {
    const secret = 'plain secret ✓';
    const headers = signatureHeaders({ webhookId: ID, timestampSec: 1_700_000_000, body: BODY, secrets: [secret] });
    expect(headers['webhook-signature']).toBe(`v1,${reference(Buffer.from(secret, 'utf8'), ID, 1_700_000_000, BODY)}`);
    expect(headers['x-webhook-signature']).toBe(
      `sha256=${createHmac('sha256', Buffer.from(secret, 'utf8')).update(BODY).digest('hex')}`,
    );
  });

  it('verifies with the standardwebhooks package for whsec_ and plain secrets', () => {
    const nowSec = Math.floor(Date.now() / 1000);
    const whsec = signatureHeaders({ webhookId: ID, timestampSec: nowSec, body: BODY, secrets: [WHSEC] });
    expect(new Webhook(WHSEC).verify(BODY, whsec)).toEqual(JSON.parse(BODY));

    // A plain secret's key is its UTF-8 bytes, which the package takes in its raw format.
    const plain = signatureHeaders({ webhookId: ID, timestampSec: nowSec, body: BODY, secrets: ['plain-secret ✓'] });
    expect(new Webhook(Buffer.from('plain-secret ✓', 'utf8'), { format: 'raw' }).verify(BODY, plain)).toEqual(
      JSON.parse(BODY),
    );

    // And it really checks: another secret or another body fails.
    expect(() => new Webhook('whsec_AAECAwQFBgcICQoLDA0ODw==').verify(BODY, whsec)).toThrow();
    expect(() => new Webhook(WHSEC).verify(`${BODY} `, whsec)).toThrow();
  });

  it('signs with both secrets during a rotation, the current one first; legacy with the previous one', () => {
    const previous = 'whsec_AAECAwQFBgcICQoLDA0ODw==';
    const nowSec = Math.floor(Date.now() / 1000);
    const headers = signatureHeaders({ webhookId: ID, timestampSec: nowSec, body: BODY, secrets: [WHSEC, previous] });
    const entries = headers['webhook-signature']?.split(' ');
    expect(entries).toEqual([
      `v1,${reference(secretKeyBytes(WHSEC), ID, nowSec, BODY)}`,
      `v1,${reference(secretKeyBytes(previous), ID, nowSec, BODY)}`,
    ]);
    // A receiver holding either secret accepts the delivery.
    expect(() => new Webhook(WHSEC).verify(BODY, headers)).not.toThrow();
    expect(() => new Webhook(previous).verify(BODY, headers)).not.toThrow();
    // The one-value legacy header carries the secret every receiver already holds: the previous one.
    expect(headers['x-webhook-signature']).toBe(`sha256=${createHmac('sha256', previous).update(BODY).digest('hex')}`);
  });

  it('signs the legacy header with the previous secret during a rotation and the current one otherwise (vectors)', () => {
    const body = '{"a":1}';
    const during = signatureHeaders({
      webhookId: 'msg_1',
      timestampSec: 1_700_000_000,
      body,
      secrets: ['new-secret', 'old-secret'],
    });
    const after = signatureHeaders({ webhookId: 'msg_1', timestampSec: 1_700_000_000, body, secrets: ['new-secret'] });
    // HMAC-SHA256 hex of {"a":1} under the UTF-8 bytes of each secret (openssl dgst -sha256 -hmac).
    expect(during['x-webhook-signature']).toBe(
      'sha256=3c72ab878c4ed3c2fde01df3b26de050e00acb2627397bd6fae626b378f72931',
    );
    expect(after['x-webhook-signature']).toBe(
      'sha256=fb31df14fa9b660a954226e53cb92e1230d5de9a9946a386b5ca88f048ab3709',
    );
  });

  it('sends only the id and timestamp without a secret', () => {
    expect(signatureHeaders({ webhookId: ID, timestampSec: 0, body: BODY, secrets: [] })).toEqual({
      'webhook-id': ID,
      'webhook-timestamp': '0',
    });
  });

  it('changes the signature with the id, the timestamp and every byte of the body', () => {
    const base = { webhookId: ID, timestampSec: 1_700_000_000, body: BODY, secrets: ['k'] };
    const sig = (over: Partial<typeof base>) => signatureHeaders({ ...base, ...over })['webhook-signature'];
    const original = sig({});
    expect(sig({ webhookId: `${ID}x` })).not.toBe(original);
    expect(sig({ timestampSec: 1_700_000_001 })).not.toBe(original);
    expect(sig({ body: BODY.replace('1.0', '1.1') })).not.toBe(original);
  });

  it('refuses a timestamp that is not whole seconds', () => {
    expect(() => signatureHeaders({ webhookId: ID, timestampSec: 1.5, body: BODY, secrets: [] })).toThrow(RangeError);
    expect(() => signatureHeaders({ webhookId: ID, timestampSec: -1, body: BODY, secrets: [] })).toThrow(RangeError);
  });
});
