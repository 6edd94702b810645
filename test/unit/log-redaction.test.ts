import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, redactLogObject } from '../../src/logger.js';

describe('log redaction', () => {
  it('blanks secrets at the top and one level down, and credential headers', () => {
    const cases: [Record<string, unknown>, Record<string, unknown>][] = [
      [
        { secret: 's', apiKey: 'k', secretKey: 'sk', key: 'hk_x' },
        { secret: '[redacted]', apiKey: '[redacted]', secretKey: '[redacted]', key: '[redacted]' },
      ],
      [{ webhook: { id: 'w', secret: 's' } }, { webhook: { id: 'w', secret: '[redacted]' } }],
      [
        { body: { apiKey: 'k', secretKey: 'sk', page: 2 } },
        { body: { apiKey: '[redacted]', secretKey: '[redacted]', page: 2 } },
      ],
      [
        {
          req: {
            method: 'GET',
            headers: { 'x-api-key': 'hk_1', authorization: 'Bearer 2', cookie: 'c=3', accept: '*/*' },
          },
        },
        {
          req: {
            method: 'GET',
            headers: { 'x-api-key': '[redacted]', authorization: '[redacted]', cookie: '[redacted]', accept: '*/*' },
          },
        },
      ],
      [
        { headers: { 'x-api-key': 'hk_1', authorization: 'Bearer 2', 'content-type': 'a/b' } },
        { headers: { 'x-api-key': '[redacted]', authorization: '[redacted]', 'content-type': 'a/b' } },
      ],
      // `key` is an ordinary word below the top (a filter's path, a map's field).
      [{ filter: { key: 'data.status' } }, { filter: { key: 'data.status' } }],
      // Two levels down is not scanned: nothing the engine logs nests a secret that deep.
      [{ a: { b: { secret: 'deep' } } }, { a: { b: { secret: 'deep' } } }],
    ];
    for (const [input, expected] of cases) expect(redactLogObject(input)).toEqual(expected);
  });

  it('never changes the caller’s object, and answers the same object when there is nothing to blank out', () => {
    const input = { webhook: { secret: 's' }, headers: { authorization: 'a' } };
    const out = redactLogObject(input);
    expect(input).toEqual({ webhook: { secret: 's' }, headers: { authorization: 'a' } });
    expect(out).not.toBe(input);
    const plain = {
      event: 'delivery.attempted',
      eventId: 'e',
      attempt: 1,
      nested: { status: 200 },
      list: [{ secret: 'in an array' }],
    };
    expect(redactLogObject(plain)).toBe(plain);
  });

  it('the logger writes no secret it was handed', () => {
    const chunks: string[] = [];
    const destination = new Writable({
      write(chunk: Buffer, _encoding, done) {
        chunks.push(chunk.toString('utf8'));
        done();
      },
    });
    const logger = createLogger({ level: 'info', format: 'json', fd: 1, destination });
    logger.info(
      { secret: 'leak1', webhook: { secret: 'leak2' }, req: { headers: { cookie: 'leak3' } }, eventId: 'kept' },
      'hello',
    );
    const line = JSON.parse(chunks.join('')) as Record<string, unknown>;
    expect(JSON.stringify(line)).not.toMatch(/leak/);
    expect(line).toMatchObject({
      secret: '[redacted]',
      webhook: { secret: '[redacted]' },
      req: { headers: { cookie: '[redacted]' } },
      eventId: 'kept',
    });
  });
});
