import { describe, expect, it } from 'vitest';
import type { SendRequest, SendResult } from '../../src/delivery/outbound/http-sender.js';
import { sendAuthorized } from '../../src/delivery/outbound/receiver-request.js';
import { ReceiverTokens } from '../../src/delivery/outbound/receiver-tokens.js';
import type { Webhook } from '../../src/domain/webhook.js';
import type { CachedToken } from '../../src/store/receiver-tokens.js';

const AUTH = {
  type: 'oauth2_client_credentials' as const,
  tokenUrl: 'https://auth.example/token',
  clientId: 'c',
  clientSecret: 's',
  scope: undefined,
  audience: undefined,
  tokenAuthMethod: 'client_secret_basic' as const,
};

/**
 * The token logic with a clock of its own: an in-memory stand-in for the shared Redis cache (the
 * integration suite runs the real one across two workers) and a token endpoint that counts requests.
 */
function world(expiresIn = 100) {
  let nowMs = 1_000_000;
  let issued = 0;
  const shared = new Map<string, { cached: CachedToken; stored: string }>();
  let clientIds = 0;
  const tokens = new ReceiverTokens({
    cache: {
      get: (id) => Promise.resolve(shared.get(id)),
      set: (id, cached) => {
        const stored = `stored-${cached.token}`;
        shared.set(id, { cached, stored });
        return Promise.resolve(stored);
      },
      forget: (id, stored) => {
        if (shared.get(id)?.stored === stored) shared.delete(id);
        return Promise.resolve();
      },
    },
    sender: {
      send: async (_request: SendRequest): Promise<SendResult> => {
        issued += 1;
        await Promise.resolve();
        const body = JSON.stringify({ access_token: `tok-${issued}`, expires_in: expiresIn });
        return { kind: 'response', status: 200, retryAfter: undefined, bodySnippet: body, durationMs: 1 };
      },
    },
    clientIdOf: () => {
      clientIds += 1;
      return 'client-1';
    },
    nowMs: () => nowMs,
    timeoutMs: 1_000,
  });
  return {
    tokens,
    shared,
    issued: () => issued,
    clientIds: () => clientIds,
    advance: (ms: number) => void (nowMs += ms),
  };
}

describe('OAuth2 tokens for receivers', () => {
  it('fetches once for concurrent deliveries, and works the client id out once per auth object', async () => {
    const w = world();
    const results = await Promise.all(Array.from({ length: 20 }, () => w.tokens.get(AUTH)));
    expect(w.issued()).toBe(1);
    expect(new Set(results.map((r) => r.ok && r.token))).toEqual(new Set(['tok-1']));
    expect(results.filter((r) => r.ok && r.fresh)).toHaveLength(20);
    expect((await w.tokens.get(AUTH)).ok && (await w.tokens.get(AUTH))).toMatchObject({ fresh: false });
    expect(w.clientIds()).toBe(1);
  });

  it('uses a token until a tenth of its life (at most a minute) before it expires, then fetches another', async () => {
    const w = world(100);
    await w.tokens.get(AUTH);
    w.advance(89_999);
    expect(await w.tokens.get(AUTH)).toMatchObject({ token: 'tok-1' });
    w.advance(1);
    expect(await w.tokens.get(AUTH)).toMatchObject({ token: 'tok-2', fresh: true });
    const long = world(3_600);
    await long.tokens.get(AUTH);
    long.advance(3_540_000 - 1);
    expect(await long.tokens.get(AUTH)).toMatchObject({ token: 'tok-1' });
    long.advance(1);
    expect(await long.tokens.get(AUTH)).toMatchObject({ token: 'tok-2' });
  });

  it('after a 401 forgets the token here and in the shared cache, and fetches one new token', async () => {
    const w = world();
    const first = await w.tokens.get(AUTH);
    if (!first.ok) throw new Error('no token');
    const refreshed = await w.tokens.refresh(AUTH, first);
    expect(refreshed).toMatchObject({ ok: true, token: 'tok-2', fresh: true });
    expect(w.shared.get('client-1')?.cached.token).toBe('tok-2');
    expect(w.issued()).toBe(2);
  });

  it('takes a token another worker stored in the shared cache instead of fetching', async () => {
    const w = world();
    w.shared.set('client-1', { cached: { token: 'from-another-worker', useUntilMs: 2_000_000 }, stored: 'x' });
    expect(await w.tokens.get(AUTH)).toMatchObject({ token: 'from-another-worker', fresh: false });
    expect(w.issued()).toBe(0);
  });

  it('a refusal that echoes the token request reaches the attempt redacted of every secret of the webhook, and capped', async () => {
    for (const tokenAuthMethod of ['client_secret_basic', 'client_secret_post'] as const) {
      const auth = { ...AUTH, clientId: 'hookline-client', clientSecret: 'client-secret-5555&x', tokenAuthMethod };
      const webhook = { auth, headers: [{ name: 'X-Api-Key', value: 'gateway-key-1234' }] } as unknown as Webhook;
      const tokens = new ReceiverTokens({
        cache: {
          get: () => Promise.resolve(undefined),
          set: () => Promise.resolve(''),
          forget: () => Promise.resolve(),
        },
        // An endpoint that quotes what it got: the Authorization header, the form body, and the header value besides.
        sender: {
          send: (request: SendRequest): Promise<SendResult> => {
            const description = `bad client gateway-key-1234; you sent ${JSON.stringify(request.headers)} ${request.body.toString()} ${'z'.repeat(400)}`;
            const body = JSON.stringify({ error: 'invalid_client', error_description: description });
            return Promise.resolve({
              kind: 'response',
              status: 401,
              retryAfter: undefined,
              bodySnippet: body,
              durationMs: 2,
            });
          },
        },
        clientIdOf: () => 'client-1',
        nowMs: () => 1_000,
        timeoutMs: 1_000,
      });
      let sent = 0;
      const receiver = { send: () => ((sent += 1), Promise.reject(new Error('not to be sent'))) };
      const request: SendRequest = { url: 'https://receiver.example/hook', headers: {}, body: '{}', timeoutMs: 1_000 };
      const result = await sendAuthorized(receiver, tokens, webhook, request);
      expect(result).toMatchObject({ kind: 'error', errorClass: 'auth' });
      const message = result.kind === 'error' ? result.message : '';
      expect(message, tokenAuthMethod).toContain('answered 401 (invalid_client: bad client ••••; you sent');
      expect(message).toContain('••••');
      expect(message).toHaveLength(300);
      const basic = Buffer.from('hookline-client:client-secret-5555%26x').toString('base64');
      for (const secret of ['client-secret-5555', basic, basic.slice(0, 16), 'gateway-key-1234'])
        expect(message, tokenAuthMethod).not.toContain(secret);
      expect(sent).toBe(0);
    }
  });
});
