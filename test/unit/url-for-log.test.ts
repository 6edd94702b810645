import { describe, expect, it } from 'vitest';
import { urlForLog } from '../../src/logger.js';

describe('urlForLog', () => {
  it.each([
    ['/vendors/v1/webhooks', '/vendors/v1/webhooks'],
    ['/vendors/v1/webhooks?api_key=hk_abc', '/vendors/v1/webhooks?api_key=[redacted]'],
    [
      '/rental/v1/machines?filter=gpu_name:rtx&page=2&page_size=',
      '/rental/v1/machines?filter=[redacted]&page=[redacted]&page_size=[redacted]',
    ],
    ['/a?token=secret-value&x=1', '/a?token=[redacted]&x=[redacted]'],
    ['/a?flag', '/a?flag=[redacted]'],
    ['/a?', '/a'],
    ['/a?&&', '/a'],
    // A name may be the credential itself.
    ['/a?hk_Zm9vYmFyYmF6cXV4cXV1eHF1dXhxdXV4cXV1eHF1dXg', '/a?[redacted]=[redacted]'],
    ['/a?api%5Fkey=hk_abc', '/a?[redacted]=[redacted]'],
    ['/a?x=1?y=2', '/a?x=[redacted]'],
  ])('%s → %s', (url, logged) => expect(urlForLog(url)).toBe(logged));
});
