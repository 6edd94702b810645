import { describe, expect, it } from 'vitest';
import {
  certificateExpiry,
  receiverChanges,
  receiverForm,
  secretState,
} from '../../web/portal/src/receiver-auth-changes.js';
import type { Webhook } from '../../web/portal/src/types.js';

/** A webhook as the API reads it, with the receiver fields given. */
const webhook = (over: Partial<Webhook>): Webhook =>
  ({ headers: {}, auth: null, tls_client_certificate: null, ...over }) as Webhook;

describe('what the portal’s webhook form sends of receiver authentication', () => {
  it('sends nothing for an untouched edit, whatever the webhook has', () => {
    const saved = webhook({
      headers: { 'X-Api-Key': '••••' },
      auth: { type: 'basic', username: 'u' },
      tls_client_certificate: {
        subject: 'CN=c',
        issuer: 'CN=ca',
        fingerprint_sha256: 'AA',
        not_after: '2030-01-01T00:00:00Z',
      },
    });
    expect(receiverChanges(saved, receiverForm(saved))).toEqual({ body: {}, problems: [] });
  });

  it('merges headers: a removed row is null, a typed value replaces, an untyped saved one is kept', () => {
    const saved = webhook({ headers: { 'X-Keep': '••••', 'X-Drop': '••••', 'X-New-Value': '••••' } });
    const form = receiverForm(saved);
    form.headers = form.headers.filter((row) => row.name !== 'X-Drop');
    form.headers.find((row) => row.name === 'X-New-Value')!.value = 'v2';
    form.headers.push({ key: 99, name: 'X-Added', value: 'a' });
    expect(receiverChanges(saved, form)).toEqual({
      body: { headers: { 'X-Drop': null, 'X-New-Value': 'v2', 'X-Added': 'a' } },
      problems: [],
    });
  });

  it('asks for the value of a renamed header and of a new one, and refuses a name twice', () => {
    const saved = webhook({ headers: { 'X-Old': '••••' } });
    const form = receiverForm(saved);
    form.headers[0]!.name = 'X-Renamed';
    form.headers.push({ key: 7, name: 'X-Empty', value: '' }, { key: 8, name: 'x-renamed', value: 'v' });
    const fields = receiverChanges(saved, form).problems.map((p) => p.field);
    expect(fields).toEqual(['value-0', 'value-7', 'name-8']);
  });

  it('keeps a saved auth while its secret is empty; asks for the secret again when its other fields change', () => {
    const saved = webhook({ auth: { type: 'basic', username: 'u' } });
    const form = receiverForm(saved);
    expect(secretState(saved.auth, form.auth)).toBe('kept');
    form.auth.username = 'someone-else';
    expect(secretState(saved.auth, form.auth)).toBe('retype');
    const { body, problems } = receiverChanges(saved, form);
    expect(body).toEqual({});
    expect(problems).toEqual([expect.objectContaining({ field: 'password' })]);
    form.auth.password = 'pw';
    expect(receiverChanges(saved, form).body).toEqual({
      auth: { type: 'basic', username: 'someone-else', password: 'pw' },
    });
  });

  it('removes auth with None, sends a new type whole, and the certificate only with both PEMs', () => {
    const saved = webhook({ auth: { type: 'bearer' } });
    const form = receiverForm(saved);
    form.auth.type = 'none';
    expect(receiverChanges(saved, form).body).toEqual({ auth: null });
    form.auth.type = 'oauth2_client_credentials';
    Object.assign(form.auth, { tokenUrl: ' https://auth.example/t ', clientId: 'c', clientSecret: 's', scope: ' ' });
    form.certPem = '-----BEGIN CERTIFICATE-----';
    const { body, problems } = receiverChanges(saved, form);
    expect(body.auth).toEqual({
      type: 'oauth2_client_credentials',
      token_url: 'https://auth.example/t',
      client_id: 'c',
      client_secret: 's',
      token_auth_method: 'client_secret_basic',
    });
    expect(problems.map((p) => p.field)).toEqual(['key-pem']);
  });

  it('a callback URL on another host asks for every kept header value and the auth secret again; a new path does not', () => {
    const saved = webhook({
      callback_url: 'https://a.example/hook',
      headers: { 'X-Api-Key': '••••', 'X-Tenant': '••••' },
      auth: { type: 'bearer' },
      tls_client_certificate: {
        subject: 'CN=c',
        issuer: 'CN=ca',
        fingerprint_sha256: 'AA',
        not_after: '2030-01-01T00:00:00Z',
      },
    });
    const form = receiverForm(saved);
    expect(receiverChanges(saved, form, 'https://a.example/other?x=1')).toEqual({ body: {}, problems: [] });
    for (const moved of ['https://b.example/hook', 'http://a.example/hook', 'https://a.example:8443/hook']) {
      const { problems } = receiverChanges(saved, form, moved);
      expect(
        problems.map((p) => p.field),
        moved,
      ).toEqual(['value-0', 'value-1', 'token']);
      expect(problems[0]!.message).toContain('moves to another host');
    }
    expect(secretState(saved.auth, form.auth, true)).toBe('moved');
    // Typed again or dropped: the body restates them, and the certificate is left as it is.
    form.headers[0]!.value = 'new-key';
    form.headers = form.headers.filter((row) => row.name !== 'X-Tenant');
    form.auth.token = 'new-token';
    expect(receiverChanges(saved, form, 'https://b.example/hook')).toEqual({
      body: { headers: { 'X-Tenant': null, 'X-Api-Key': 'new-key' }, auth: { type: 'bearer', token: 'new-token' } },
      problems: [],
    });
  });

  it('warns about a certificate from 30 days before it expires', () => {
    const now = Date.UTC(2026, 10, 27);
    const inDays = (days: number) => new Date(now + days * 86_400_000).toISOString();
    expect(certificateExpiry(inDays(31), now)).toBe('valid');
    expect(certificateExpiry(inDays(30), now)).toBe('soon');
    expect(certificateExpiry(inDays(0), now)).toBe('expired');
  });
});
