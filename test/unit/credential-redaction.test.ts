import { describe, expect, it } from 'vitest';
import { credentialForms, formEncode, redactCredentials } from '../../src/domain/credential-redaction.js';

const b64 = (text: string) => Buffer.from(text, 'utf8').toString('base64');

describe('redacting a webhook’s credentials from text', () => {
  const oauth = {
    type: 'oauth2_client_credentials' as const,
    tokenUrl: 'https://auth.example/token',
    clientId: 'client id',
    clientSecret: 's3cret&value=1',
    scope: undefined,
    audience: undefined,
    tokenAuthMethod: 'client_secret_basic' as const,
  };

  it('finds the OAuth2 client secret as it is, URL- and form-encoded, in base64, and inside the Basic credentials', () => {
    const forms = credentialForms(oauth, []);
    const echoes = [
      'client_secret=s3cret%26value%3D1',
      `Authorization: Basic ${b64(`${formEncode('client id')}:${formEncode('s3cret&value=1')}`)}`,
      `basic ${b64('client id:s3cret&value=1')}`,
      `raw s3cret&value=1 and ${b64('s3cret&value=1')}`,
    ];
    for (const echo of echoes) {
      const redacted = redactCredentials(`invalid_client: ${echo}`, forms, 1_000);
      expect(redacted, echo).toContain('••••');
      expect(redacted, echo).not.toMatch(/s3cret|value%3D1/);
      expect(redacted, echo).not.toContain(b64('s3cret&value=1').slice(0, 12));
    }
  });

  it('finds header values, the basic password (also in its Basic header) and the bearer token; none absent in this process', () => {
    const headers = [{ value: 'gateway-key-1234' }, { value: undefined }];
    const basic = credentialForms({ type: 'basic', username: 'u', password: 'pass word' }, headers);
    expect(redactCredentials(`got gateway-key-1234 and pass+word and ${b64('u:pass word')}`, basic, 1_000)).toBe(
      'got •••• and •••• and ••••',
    );
    const bearer = credentialForms({ type: 'bearer', token: 'tok-5678' }, []);
    expect(redactCredentials('Bearer tok-5678', bearer, 1_000)).toBe('Bearer ••••');
    expect(credentialForms({ type: 'bearer', token: undefined }, [{ value: undefined }])).toEqual([]);
  });

  it('leaves secrets under four characters alone, and caps after redacting, so no secret is cut before it is found', () => {
    const forms = credentialForms({ type: 'bearer', token: 'abc' }, []);
    expect(redactCredentials('abc', forms, 100)).toBe('abc');
    const long = credentialForms({ type: 'bearer', token: 'the-long-secret-0123456789' }, []);
    const text = `${'x'.repeat(20)}the-long-secret-0123456789${'y'.repeat(50)}`;
    const capped = redactCredentials(text, long, 30);
    expect(capped).toBe(`${'x'.repeat(20)}••••${'y'.repeat(5)}…`);
    expect(capped).toHaveLength(30);
  });
});
