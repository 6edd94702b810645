import { describe, expect, it } from 'vitest';
import { SecretBox } from '../../src/store/secret-box.js';

const key = Buffer.alloc(32, 1);

describe('SecretBox (AES-256-GCM)', () => {
  it('round-trips and never repeats a ciphertext', () => {
    const box = new SecretBox(key);
    const a = box.seal('whsec_abc', 'wh-1');
    const b = box.seal('whsec_abc', 'wh-1');
    expect(a).not.toBe(b);
    expect(a).not.toContain('whsec_abc');
    expect(a.startsWith('v1.')).toBe(true);
    expect(box.open(a, 'wh-1')).toBe('whsec_abc');
    expect(box.open(b, 'wh-1')).toBe('whsec_abc');
  });

  it('refuses another key, other associated data and a tampered ciphertext', () => {
    const sealed = new SecretBox(key).seal('s3cret', 'wh-1');
    expect(() => new SecretBox(Buffer.alloc(32, 2)).open(sealed, 'wh-1')).toThrow();
    expect(() => new SecretBox(key).open(sealed, 'wh-2')).toThrow();
    const parts = sealed.split('.');
    const body = Buffer.from(parts[3] ?? '', 'base64url');
    body[0] = (body[0] ?? 0) ^ 1;
    expect(() =>
      new SecretBox(key).open([parts[0], parts[1], parts[2], body.toString('base64url')].join('.'), 'wh-1'),
    ).toThrow();
    expect(() => new SecretBox(key).open('garbage', 'wh-1')).toThrow('unknown format');
  });

  it('derives opaque ids: fixed for a key, purpose and text, unrelated across texts, purposes and keys', () => {
    const box = new SecretBox(key);
    // HMAC-SHA256 under HKDF-SHA256(key, info "hookline opaque id: signing key id"), 16 bytes, base64url.
    expect(box.opaqueId('signing key id', '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f.1')).toBe('RB_Rf35WSAMmxEscTNiHVg');
    expect(box.opaqueId('signing key id', '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f.2')).toBe('DOpCbGhnfMaD95goDcZ2ew');
    expect(box.opaqueId('another purpose', '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f.1')).not.toBe(
      'RB_Rf35WSAMmxEscTNiHVg',
    );
    expect(
      new SecretBox(Buffer.alloc(32, 2)).opaqueId('signing key id', '3f1c8f0e-2b7a-4c55-9d0e-0a4b8c1d2e3f.1'),
    ).not.toBe('RB_Rf35WSAMmxEscTNiHVg');
  });

  it('without a key (the CLI’s commands) seals and opens nothing', () => {
    const sealed = new SecretBox(key).seal('s3cret', 'wh-1');
    const keyless = new SecretBox(undefined);
    expect(keyless.hasKey).toBe(false);
    expect(() => keyless.open(sealed, 'wh-1')).toThrow('no secret key');
    expect(() => keyless.seal('s3cret', 'wh-1')).toThrow('no secret key');
  });

  it('needs a 32-byte key', () => {
    expect(() => new SecretBox(Buffer.alloc(16))).toThrow();
  });
});
