import { describe, expect, it } from 'vitest';
import {
  credentialsToRestate,
  headerNameProblem,
  headersAuthProblem,
  headersProblem,
  staticAuthorization,
  toAuthView,
  tokenUrlProblem,
} from '../../src/domain/receiver-auth.js';
import { readTokenResponse, tokenRequest } from '../../src/delivery/outbound/receiver-tokens.js';
import type { SendResult } from '../../src/delivery/outbound/http-sender.js';

const response = (status: number, body: unknown): SendResult => ({
  kind: 'response',
  status,
  retryAfter: undefined,
  bodySnippet: typeof body === 'string' ? body : JSON.stringify(body),
  durationMs: 3,
});

const TOKEN_URL = 'https://auth.example/oauth/token?tenant=secret-tenant';

describe('custom header rules', () => {
  it('refuses what the engine sends and connection headers, case-insensitively; allows the rest', () => {
    for (const name of ['Webhook-Id', 'x-webhook-signature', 'HOST', 'Transfer-Encoding', 'Connection', 'User-Agent'])
      expect(headerNameProblem(name), name).toContain('cannot be set');
    for (const name of ['X-Api-Key', 'Authorization', 'X-Tenant-Id', 'apikey'])
      expect(headerNameProblem(name)).toBeUndefined();
    expect(headerNameProblem('X Api')).toContain('token characters');
    expect(headerNameProblem('x'.repeat(65))).toContain('1 to 64');
  });

  it('refuses duplicate names, control characters, empty and non-ASCII values, and more than ten', () => {
    expect(
      headersProblem([
        ['X-A', '1'],
        ['x-a', '2'],
      ]),
    ).toContain('twice');
    expect(headersProblem([['X-A', 'a\nb']])).toContain('printable ASCII');
    expect(headersProblem([['X-A', '']])).toContain('printable ASCII');
    expect(headersProblem([['X-A', '••••']])).toContain('printable ASCII');
    expect(headersProblem(Array.from({ length: 11 }, (_, i) => [`X-${i}`, 'v'] as const))).toContain('at most 10');
    expect(headersProblem([['X-A', 'value with spaces\tand a tab']])).toBeUndefined();
  });

  it('refuses an authorization header only beside auth', () => {
    expect(headersAuthProblem(['AUTHORIZATION'], true)).toContain('"AUTHORIZATION"');
    expect(headersAuthProblem(['AUTHORIZATION'], false)).toBeUndefined();
  });
});

describe('credentials a callback URL on another origin would carry', () => {
  const stored = { headerNames: ['X-Api-Key', 'X-Tenant'], hasAuth: true };
  const from = 'https://a.example/hook';

  it('names every header not given again and auth, for a new scheme, host or port; none for a new path or query', () => {
    for (const to of ['https://b.example/hook', 'http://a.example/hook', 'https://a.example:8443/hook'])
      expect(credentialsToRestate(from, to, stored, {}), to).toEqual({
        headers: ['X-Api-Key', 'X-Tenant'],
        auth: true,
      });
    for (const to of ['https://A.EXAMPLE:443/other?tenant=1', 'https://a.example/hook#x'])
      expect(credentialsToRestate(from, to, stored, {}), to).toBeUndefined();
  });

  it('counts a header given anew or removed (names case-insensitive), headers null, and auth given or null', () => {
    const to = 'https://b.example/hook';
    expect(credentialsToRestate(from, to, stored, { headers: { 'x-api-key': 'new' } })).toEqual({
      headers: ['X-Tenant'],
      auth: true,
    });
    expect(
      credentialsToRestate(from, to, stored, { headers: { 'X-Api-Key': 'new', 'x-tenant': null }, auth: null }),
    ).toBeUndefined();
    expect(credentialsToRestate(from, to, stored, { headers: null, auth: { type: 'bearer' } })).toBeUndefined();
    expect(credentialsToRestate(from, to, { headerNames: [], hasAuth: false }, {})).toBeUndefined();
  });
});

describe('token URL rules', () => {
  it('refuses credentials, a fragment and secret-named query parameters, naming them; keeps the rest', () => {
    expect(tokenUrlProblem('https://client:s3cret@auth.example/token')).toContain('must not contain credentials');
    expect(tokenUrlProblem('https://client@auth.example/token')).toContain('must not contain credentials');
    expect(tokenUrlProblem('https://auth.example/token#x')).toContain('fragment');
    expect(tokenUrlProblem('http://auth.example/token')).toContain('https URL');
    const refused = [
      'client_secret',
      'Client-Secret',
      'secret',
      'password',
      'access_token',
      'token',
      'api_key',
      'apikey',
      'key',
      'auth',
      'credentials',
      'sig',
      'code',
      'client_assertion',
    ];
    for (const name of refused)
      expect(tokenUrlProblem(`https://auth.example/token?tenant=t&${name}=v`), name).toContain(`("${name}")`);
    expect(tokenUrlProblem('https://auth.example/token?client_secret=a&token=b&client_secret=c')).toContain(
      '("client_secret", "token")',
    );
    for (const kept of [
      'https://auth.example/oauth2/v2.0/token',
      'https://auth.example/token?p=B2C_1_signin&api-version=1.0&tenant=acme&client_id=c&resource=api',
    ])
      expect(tokenUrlProblem(kept), kept).toBeUndefined();
  });

  it('reads mask what such a URL stored before the rule carries; others are shown as they are', () => {
    const view = (tokenUrl: string) =>
      toAuthView({
        type: 'oauth2_client_credentials',
        tokenUrl,
        clientId: 'c',
        clientSecret: 's',
        scope: undefined,
        audience: undefined,
        tokenAuthMethod: 'client_secret_basic',
      }).token_url;
    expect(view('https://user:pw@auth.example/token?tenant=a%20b&client_secret=s3cret')).toBe(
      'https://••••@auth.example/token?tenant=a%20b&client_secret=••••',
    );
    expect(view('https://auth.example/token?tenant=a+b')).toBe('https://auth.example/token?tenant=a+b');
  });
});

describe('static authorization', () => {
  it('is Basic base64(user:password) and Bearer token; nothing without the secret (a process without the key)', () => {
    expect(staticAuthorization({ type: 'basic', username: 'u', password: 'p:w' })).toBe(
      `Basic ${Buffer.from('u:p:w').toString('base64')}`,
    );
    expect(staticAuthorization({ type: 'bearer', token: 't0k' })).toBe('Bearer t0k');
    expect(staticAuthorization({ type: 'bearer', token: undefined })).toBeUndefined();
  });
});

describe('OAuth2 token requests and answers', () => {
  const auth = {
    type: 'oauth2_client_credentials' as const,
    tokenUrl: TOKEN_URL,
    clientId: 'client id',
    clientSecret: 's&cret',
    scope: 'a b',
    audience: 'https://api.example',
    tokenAuthMethod: 'client_secret_basic' as const,
  };

  it('asks for client_credentials with scope and audience, the client form-encoded in Basic', () => {
    const request = tokenRequest(auth, 5_000);
    const form = new URLSearchParams(request.body);
    expect(Object.fromEntries(form)).toEqual({
      grant_type: 'client_credentials',
      scope: 'a b',
      audience: 'https://api.example',
    });
    expect(request.headers['content-type']).toBe('application/x-www-form-urlencoded');
    expect(Buffer.from(request.headers.authorization!.slice(6), 'base64').toString()).toBe('client+id:s%26cret');
    const post = tokenRequest({ ...auth, tokenAuthMethod: 'client_secret_post' }, 5_000);
    expect(post.headers.authorization).toBeUndefined();
    expect(new URLSearchParams(post.body).get('client_secret')).toBe('s&cret');
  });

  it('reads the token and its life; 300 s when the endpoint states none', () => {
    expect(
      readTokenResponse(response(200, { access_token: 'abc', token_type: 'bearer', expires_in: 60 }), TOKEN_URL),
    ).toEqual({
      ok: true,
      token: 'abc',
      expiresInS: 60,
    });
    expect(readTokenResponse(response(200, { access_token: 'abc' }), TOKEN_URL)).toMatchObject({ expiresInS: 300 });
  });

  it('says why there is no token, never quoting the body beyond error and error_description, nor the URL query', () => {
    const refused = readTokenResponse(
      response(400, { error: 'invalid_scope', error_description: 'no such scope', access_token: 'leak' }),
      TOKEN_URL,
    );
    expect(refused).toEqual({
      ok: false,
      message: 'token endpoint https://auth.example/oauth/token answered 400 (invalid_scope: no such scope)',
    });
    expect(readTokenResponse(response(200, 'not json'), TOKEN_URL)).toMatchObject({ ok: false });
    expect(readTokenResponse(response(200, { access_token: 'has space' }), TOKEN_URL)).toMatchObject({ ok: false });
    const mac = readTokenResponse(response(200, { access_token: 'm', token_type: 'mac' }), TOKEN_URL);
    expect(mac.ok).toBe(false);
    expect(!mac.ok && mac.message).toContain('only Bearer');
    const failed = readTokenResponse(
      { kind: 'error', errorClass: 'connect', message: 'ECONNREFUSED', durationMs: 1 },
      TOKEN_URL,
    );
    expect(failed).toEqual({
      ok: false,
      message: 'token request to https://auth.example/oauth/token failed: ECONNREFUSED',
    });
  });
});
