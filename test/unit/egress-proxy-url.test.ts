import { describe, expect, it } from 'vitest';
import { parseEgressProxyUrl } from '../../src/config/egress-proxy-url.js';

const basic = (userPassword: string) => `Basic ${Buffer.from(userPassword, 'utf8').toString('base64')}`;

describe('parseEgressProxyUrl', () => {
  it.each([
    ['http://127.0.0.1:3128', { host: '127.0.0.1', port: 3128 }],
    ['http://egress.internal', { host: 'egress.internal', port: 80 }],
    ['http://egress.internal:80/', { host: 'egress.internal', port: 80 }],
    ['HTTP://Egress.Internal:8080', { host: 'egress.internal', port: 8080 }],
    ['http://[::1]:3128', { host: '::1', port: 3128 }],
    ['http://[2001:db8::1]', { host: '2001:db8::1', port: 80 }],
    ['  http://egress.internal:3128  ', { host: 'egress.internal', port: 3128 }],
  ])('%s → %o, no credentials', (text, expected) => {
    expect(parseEgressProxyUrl(text)).toStrictEqual(expected);
  });

  it.each([
    ['http://hookline:s3cret@egress.internal:3128', 'hookline:s3cret'],
    // Reserved characters arrive percent-encoded and are sent decoded.
    ['http://hook%20line:pa%40ss%3Aw%2Frd@egress.internal:3128', 'hook line:pa@ss:w/rd'],
    ['http://us%C3%A9r:p%E2%9C%93@egress.internal:3128', 'usér:p✓'],
    ['http://hookline@egress.internal:3128', 'hookline:'],
    ['http://:s3cret@egress.internal:3128', ':s3cret'],
  ])('%s → Proxy-Authorization Basic %s', (text, userPassword) => {
    expect(parseEgressProxyUrl(text)).toStrictEqual({
      host: 'egress.internal',
      port: 3128,
      authorization: basic(userPassword),
    });
  });

  const PASSWORD = 'Pa55w0rd-Sekrit';
  const SCHEME = 'the scheme must be http:// (TLS to the receiver runs inside the tunnel)';
  it.each([
    ['', 'it is not a URL'],
    ['egress.internal:3128', SCHEME],
    [`hookline:${PASSWORD}@egress.internal:3128`, SCHEME],
    [`http://hookline:${PASSWORD}@:3128`, 'it is not a URL'],
    [`http://hookline:${PASSWORD}@egress.internal:99999`, 'it is not a URL'],
    [`http://hookline:${PASSWORD}@[::1:3128`, 'it is not a URL'],
    [`https://hookline:${PASSWORD}@egress.internal:3128`, SCHEME],
    [`socks5://hookline:${PASSWORD}@egress.internal:1080`, SCHEME],
    [`http:hookline:${PASSWORD}@egress.internal:3128`, SCHEME],
    [`http:///hookline:${PASSWORD}@egress.internal:3128`, SCHEME],
    [`http://hookline:${PASSWORD}@egress.internal:3128/proxy`, 'it may not have a path, query or fragment'],
    [`http://hookline:${PASSWORD}@egress.internal:3128/?a=1`, 'it may not have a path, query or fragment'],
    [`http://hookline:${PASSWORD}@egress.internal:3128?`, 'it may not have a path, query or fragment'],
    [`http://hookline:${PASSWORD}@egress.internal:3128#top`, 'it may not have a path, query or fragment'],
    [`http://hookline:${PASSWORD}@egress.internal:3128#`, 'it may not have a path, query or fragment'],
    [`http://hookline:${PASSWORD}@egress.internal:0`, 'port 0 is not a port to connect to'],
    [`http://hookline:${PASSWORD}%ZZ@egress.internal:3128`, 'its credentials are not validly percent-encoded'],
    [`http://hook%3Aline:${PASSWORD}@egress.internal:3128`, "the user name may not contain ':'"],
  ])('refuses %j (%s), never quoting the password', (text, reason) => {
    let thrown: unknown;
    try {
      parseEgressProxyUrl(text);
    } catch (error) {
      thrown = error;
    }
    expect(thrown).toBeInstanceOf(Error);
    const error = thrown as Error;
    expect(error.message).toBe(`HOOKLINE_EGRESS_PROXY must be an http:// URL with a host (and port); ${reason}`);
    // Every property (stack, cause, a URL error's `input`) is where a password could leak to a log.
    const everything = JSON.stringify(error, ['message', 'stack', 'cause', 'input', ...Object.keys(error)]);
    expect(everything).not.toContain(PASSWORD);
    expect(everything).not.toContain('hookline');
    expect(error.cause).toBeUndefined();
  });
});
