import { createPrivateKey, createPublicKey, generateKeyPairSync, verify } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { asymmetricSignature, ed25519PublicKey, publicKeyText, verifyAsymmetricWebhook } from '@hookline/verify';
import { signatureHeaders } from '../../src/delivery/outbound/sign.js';

/** A private key from RFC 8032's raw seed and public key (hex). */
function rfcKey(seedHex: string, publicHex: string) {
  const jwk = {
    kty: 'OKP',
    crv: 'Ed25519',
    d: Buffer.from(seedHex, 'hex').toString('base64url'),
    x: Buffer.from(publicHex, 'hex').toString('base64url'),
  };
  return {
    privateKey: createPrivateKey({ key: jwk, format: 'jwk' }),
    publicKey: createPublicKey({ key: { ...jwk, d: undefined }, format: 'jwk' }),
  };
}

// RFC 8032 section 7.1, TEST 1 and TEST 2.
const TEST1 = rfcKey(
  '9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60',
  'd75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a',
);
const TEST2 = rfcKey(
  '4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb',
  '3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c',
);

const ID = 'msg_p5jXN8AQM9LWM0D4loKWxJek';
const TS = 1614265330;
const BODY = '{"test": 2432232314}';
// Ed25519 is deterministic: RFC 8032 TEST 1's key over `msg_p5jXN8AQM9LWM0D4loKWxJek.1614265330.{"test": 2432232314}`.
const V1A_VECTOR = 'fldxM4gAKugP6nnt1hdz3sgGfZ6d99nzrMFnZOELIxbzEHoVmAb2ADpkJK7zgPePmPsle0zV9jSeGlHFG2NVAw==';

describe('Ed25519 signatures (v1a)', () => {
  it('the key handling reproduces RFC 8032 test vectors', async () => {
    const { sign } = await import('node:crypto');
    expect(sign(null, Buffer.alloc(0), TEST1.privateKey).toString('hex')).toBe(
      'e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b',
    );
    expect(sign(null, Buffer.from([0x72]), TEST2.privateKey).toString('hex')).toBe(
      '92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00',
    );
  });

  it('signs `{id}.{timestamp}.{body}`, the content v1 signs: a fixed vector, checked by node:crypto alone', () => {
    const signature = asymmetricSignature(TEST1.privateKey, ID, TS, BODY);
    expect(signature).toBe(V1A_VECTOR);
    expect(verify(null, Buffer.from(`${ID}.${TS}.${BODY}`), TEST1.publicKey, Buffer.from(signature, 'base64'))).toBe(
      true,
    );
  });

  it('writes public keys as whpk_ and reads them back from whpk_, JWK and KeyObject', () => {
    const text = publicKeyText(TEST1.publicKey);
    expect(text).toBe(
      `whpk_${Buffer.from('d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a', 'hex').toString('base64')}`,
    );
    const jwk = TEST1.publicKey.export({ format: 'jwk' });
    for (const form of [text, jwk, TEST1.publicKey]) expect(ed25519PublicKey(form).equals(TEST1.publicKey)).toBe(true);
    expect(() => ed25519PublicKey('whpk_AAAA')).toThrow(/32 bytes/);
    expect(() => ed25519PublicKey({ kty: 'RSA' })).toThrow(/not an Ed25519 JWK/);
    expect(() => ed25519PublicKey(TEST1.privateKey)).toThrow(/not an Ed25519 public key/);
  });

  it('signatureHeaders: keys alone give only v1a (no legacy header); with a secret, v1 and v1a and the legacy HMAC', () => {
    const keysOnly = signatureHeaders({
      webhookId: ID,
      timestampSec: TS,
      body: BODY,
      secrets: [],
      signingKeys: [TEST1.privateKey],
    });
    expect(keysOnly['webhook-signature']).toBe(`v1a,${V1A_VECTOR}`);
    expect(keysOnly['x-webhook-signature']).toBeUndefined();
    const both = signatureHeaders({
      webhookId: ID,
      timestampSec: TS,
      body: BODY,
      secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'],
      signingKeys: [TEST1.privateKey, TEST2.privateKey],
    });
    expect(both['webhook-signature']!.split(' ').map((e) => e.split(',')[0])).toEqual(['v1', 'v1a', 'v1a']);
    expect(both['webhook-signature']).toContain('v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=');
    expect(both['x-webhook-signature']).toMatch(/^sha256=[0-9a-f]{64}$/);
  });

  it('verifyAsymmetricWebhook accepts a genuine request and refuses tampering, other keys and old timestamps', () => {
    const headers = signatureHeaders({
      webhookId: ID,
      timestampSec: TS,
      body: BODY,
      secrets: [],
      signingKeys: [TEST1.privateKey],
    });
    const check = (overrides: Partial<Parameters<typeof verifyAsymmetricWebhook>[0]>) =>
      verifyAsymmetricWebhook({
        publicKeys: [publicKeyText(TEST1.publicKey)],
        headers,
        body: BODY,
        nowSec: TS + 10,
        ...overrides,
      });
    expect(check({})).toBe(true);
    expect(check({ body: BODY.replace('2432', '2433') })).toBe(false);
    expect(check({ publicKeys: [TEST2.publicKey] })).toBe(false);
    // During a rotation the receiver holds both keys; either matches.
    expect(check({ publicKeys: [TEST2.publicKey, TEST1.publicKey.export({ format: 'jwk' })] })).toBe(true);
    expect(check({ nowSec: TS + 301 })).toBe(false);
    expect(check({ headers: { ...headers, 'webhook-id': 'msg_other' } })).toBe(false);
    // A v1 HMAC entry is no v1a signature.
    expect(
      check({ headers: { ...headers, 'webhook-signature': 'v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=' } }),
    ).toBe(false);
  });

  it('a fresh key pair signs and verifies', () => {
    const { privateKey, publicKey } = generateKeyPairSync('ed25519');
    const headers = signatureHeaders({
      webhookId: ID,
      timestampSec: TS,
      body: BODY,
      secrets: [],
      signingKeys: [privateKey],
    });
    expect(
      verifyAsymmetricWebhook({ publicKeys: [publicKeyText(publicKey)], headers, body: Buffer.from(BODY), nowSec: TS }),
    ).toBe(true);
  });
});
