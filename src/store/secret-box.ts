import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from 'node:crypto';

const VERSION = 'v1';
const IV_BYTES = 12;
const TAG_BYTES = 16;

/**
 * Encrypts webhook secrets at rest with AES-256-GCM. The associated data binds a ciphertext to the
 * record it belongs to, so a ciphertext copied onto another webhook does not decrypt.
 */
export class SecretBox {
  readonly #key: Buffer | undefined;
  /** opaqueId's keys, one per purpose. */
  readonly #idKeys = new Map<string, Buffer>();

  /**
   * `key` undefined makes a box for a process that never needs a secret in the clear (the CLI's
   * commands, which run without HOOKLINE_SECRET_KEY): its seal() and open() throw.
   */
  constructor(key: Buffer | undefined) {
    if (key !== undefined && key.length !== 32) throw new Error('SecretBox needs a 32-byte key');
    this.#key = key && Buffer.from(key);
  }

  /** Whether this box can seal and open (it has a key). */
  get hasKey(): boolean {
    return this.#key !== undefined;
  }

  /** Returns `v1.<iv>.<tag>.<ciphertext>` (base64url parts). */
  seal(plaintext: string, associatedData: string): string {
    const iv = randomBytes(IV_BYTES);
    const cipher = createCipheriv('aes-256-gcm', this.#needKey(), iv, { authTagLength: TAG_BYTES });
    cipher.setAAD(Buffer.from(associatedData, 'utf8'));
    const body = Buffer.concat([cipher.update(plaintext, 'utf8'), cipher.final()]);
    return [
      VERSION,
      iv.toString('base64url'),
      cipher.getAuthTag().toString('base64url'),
      body.toString('base64url'),
    ].join('.');
  }

  /**
   * An opaque id for `text` (128 bits, base64url) that only the holder of the key can compute or tie
   * back to `text`: HMAC-SHA256 under a key derived (HKDF) for `purpose`, so ids of one purpose say
   * nothing of another's and nothing of the encryption key.
   */
  opaqueId(purpose: string, text: string): string {
    let key = this.#idKeys.get(purpose);
    if (key === undefined) {
      key = Buffer.from(hkdfSync('sha256', this.#needKey(), Buffer.alloc(0), `hookline opaque id: ${purpose}`, 32));
      this.#idKeys.set(purpose, key);
    }
    return createHmac('sha256', key).update(text, 'utf8').digest().subarray(0, 16).toString('base64url');
  }

  /** Reverses seal(); throws when the key, the associated data or the ciphertext does not match. */
  open(sealed: string, associatedData: string): string {
    const [version, iv, tag, body] = sealed.split('.');
    if (version !== VERSION || iv === undefined || tag === undefined || body === undefined) {
      throw new Error('sealed secret has an unknown format');
    }
    const decipher = createDecipheriv('aes-256-gcm', this.#needKey(), Buffer.from(iv, 'base64url'), {
      authTagLength: TAG_BYTES,
    });
    decipher.setAAD(Buffer.from(associatedData, 'utf8'));
    decipher.setAuthTag(Buffer.from(tag, 'base64url'));
    return Buffer.concat([decipher.update(Buffer.from(body, 'base64url')), decipher.final()]).toString('utf8');
  }

  #needKey(): Buffer {
    if (this.#key === undefined) throw new Error('no secret key: this process cannot seal or open webhook secrets');
    return this.#key;
  }
}
