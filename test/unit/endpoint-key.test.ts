import { describe, expect, it } from 'vitest';
import { endpointKey, endpointParts } from '../../src/domain/endpoint.js';

describe('endpointKey', () => {
  it('is one vendor’s URL origin: paths, queries and credentials of that vendor share it, other vendors never do', () => {
    const a = endpointKey('vendor-a', 'https://hooks.example.com/a/bad?x=1');
    expect(a).toBe('vendor-a https://hooks.example.com');
    expect(endpointKey('vendor-a', 'https://user:pass@hooks.example.com:443/a/ok')).toBe(a);
    expect(endpointKey('vendor-b', 'https://hooks.example.com/a/bad?x=1')).not.toBe(a);
    expect(endpointKey('vendor-a', 'http://hooks.example.com/a/bad')).not.toBe(a);
    expect(endpointKey('vendor-a', 'https://hooks.example.com:8443/a/bad')).not.toBe(a);
  });

  it('gives back the vendor and the origin it was built from', () => {
    expect(endpointParts(endpointKey('v.1:x@y-z', 'http://[::1]:8080/p'))).toEqual({
      vendorId: 'v.1:x@y-z',
      origin: 'http://[::1]:8080',
    });
  });
});
