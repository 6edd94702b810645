import { describe, expect, it } from 'vitest';
import { blockedAddressReason, parseIpLiteralHost } from '../../src/domain/ip-policy.js';

/** [address, expected reason or undefined for a public address]. */
const ADDRESSES: [string, string | undefined][] = [
  // IPv4: public
  ['8.8.8.8', undefined],
  ['1.1.1.1', undefined],
  ['93.184.215.14', undefined],
  ['9.255.255.255', undefined],
  ['11.0.0.0', undefined],
  ['100.63.255.255', undefined],
  ['100.128.0.0', undefined],
  ['172.15.255.255', undefined],
  ['172.32.0.0', undefined],
  ['192.167.255.255', undefined],
  ['192.169.0.0', undefined],
  ['198.17.255.255', undefined],
  ['198.20.0.0', undefined],
  ['223.255.255.255', undefined],
  // IPv4: blocked
  ['0.0.0.0', 'unspecified'],
  ['0.1.2.3', 'unspecified'],
  ['127.0.0.1', 'loopback'],
  ['127.255.255.254', 'loopback'],
  ['10.0.0.1', 'private'],
  ['10.255.255.255', 'private'],
  ['172.16.0.1', 'private'],
  ['172.31.255.255', 'private'],
  ['192.168.1.1', 'private'],
  ['100.64.0.1', 'cgnat'],
  ['100.127.255.255', 'cgnat'],
  ['100.100.100.200', 'cgnat (metadata)'],
  ['169.254.169.254', 'link-local (metadata)'],
  ['169.254.0.1', 'link-local'],
  ['192.0.0.8', 'reserved'],
  ['192.0.0.192', 'reserved (metadata)'],
  ['192.0.2.10', 'documentation'],
  ['198.51.100.7', 'documentation'],
  ['203.0.113.200', 'documentation'],
  ['192.88.99.1', 'reserved'],
  ['198.18.0.1', 'benchmarking'],
  ['198.19.255.255', 'benchmarking'],
  ['224.0.0.1', 'multicast'],
  ['239.255.255.250', 'multicast'],
  ['240.0.0.1', 'reserved'],
  ['254.1.2.3', 'reserved'],
  ['255.255.255.255', 'broadcast'],
  // IPv6: public
  ['2606:4700:4700::1111', undefined],
  ['2001:4860:4860::8888', undefined],
  ['2a00:1450:4001:82a::200e', undefined],
  ['2001:1::1', undefined],
  ['64:ff9b::808:808', undefined],
  ['64:ff9b::8.8.8.8', undefined],
  ['2002:808:808::1', undefined],
  ['::ffff:8.8.8.8', undefined],
  ['::ffff:808:808', undefined],
  // IPv6: blocked
  ['::', 'unspecified'],
  ['::1', 'loopback'],
  ['0:0:0:0:0:0:0:1', 'loopback'],
  ['::ffff:127.0.0.1', 'loopback via IPv4-mapped'],
  ['::ffff:7f00:1', 'loopback via IPv4-mapped'],
  ['::FFFF:A00:1', 'private via IPv4-mapped'],
  ['::ffff:169.254.169.254', 'link-local (metadata) via IPv4-mapped'],
  ['0:0:0:0:0:ffff:c0a8:101', 'private via IPv4-mapped'],
  ['::127.0.0.1', 'reserved (IPv4-compatible)'],
  ['::8.8.8.8', 'reserved (IPv4-compatible)'],
  ['64:ff9b::127.0.0.1', 'loopback via NAT64'],
  ['64:ff9b::a9fe:a9fe', 'link-local (metadata) via NAT64'],
  ['64:ff9b:1::1', 'reserved (local NAT64)'],
  ['2002:7f00:1::', 'loopback via 6to4'],
  ['2002:c0a8:101:1::1', 'private via 6to4'],
  ['2001::1', 'teredo'],
  ['2001:0:4136:e378:8000:63bf:3fff:fdd2', 'teredo'],
  ['2001:2::1', 'benchmarking'],
  ['2001:db8::1', 'documentation'],
  ['2001:db8:1:2:3:4:1.2.3.4', 'documentation'],
  ['3fff::1', 'documentation'],
  ['fc00::1', 'unique-local'],
  ['fdff:ffff::1', 'unique-local'],
  ['fd00:ec2::254', 'unique-local (metadata)'],
  ['fd00:ec2::253', 'unique-local'],
  ['fe80::1', 'link-local'],
  ['fe80::1%eth0', 'link-local'],
  ['febf::1', 'link-local'],
  ['fec0::1', 'site-local'],
  ['ff02::1', 'multicast'],
  ['ff05::1:3', 'multicast'],
  ['100::1', 'reserved (discard-only)'],
  ['4000::1', 'reserved'],
  ['1::', 'reserved'],
  // Not an address at all: fail closed.
  ['localhost', 'not an IP address'],
  ['', 'not an IP address'],
  ['127.0.0.1.5', 'not an IP address'],
  ['010.0.0.1', 'not an IP address'],
];

describe('blockedAddressReason', () => {
  it('covers a table of at least 40 addresses', () => {
    expect(ADDRESSES.length).toBeGreaterThanOrEqual(40);
  });

  it.each(ADDRESSES)('%s → %s', (address, reason) => {
    expect(blockedAddressReason(address)).toBe(reason);
  });
});

describe('parseIpLiteralHost', () => {
  it.each<[string, string | undefined]>([
    ['127.0.0.1', '127.0.0.1'],
    ['[::1]', '::1'],
    ['[::ffff:7f00:1]', '::ffff:7f00:1'],
    ['::1', '::1'],
    ['example.com', undefined],
    ['localhost', undefined],
    ['[example.com]', undefined],
    ['[127.0.0.1]', undefined],
    ['', undefined],
  ])('%s → %s', (hostname, literal) => {
    expect(parseIpLiteralHost(hostname)).toBe(literal);
  });
});

describe('callback URLs: what WHATWG leaves in hostname, judged by the policy', () => {
  const verdict = (url: string) => {
    const literal = parseIpLiteralHost(new URL(url).hostname);
    return literal === undefined ? 'name' : (blockedAddressReason(literal) ?? 'allowed');
  };

  it.each<[string, string]>([
    ['http://127.0.0.1/', 'loopback'],
    ['http://2130706433/', 'loopback'],
    ['http://0x7f.1/', 'loopback'],
    ['http://0x7f000001:8080/', 'loopback'],
    ['http://017700000001/', 'loopback'],
    ['http://0177.0.0.1/', 'loopback'],
    ['http://127.1/', 'loopback'],
    ['http://127.0.0.1./', 'loopback'],
    ['http://%31%32%37.0.0.1/', 'loopback'],
    ['http://0/', 'unspecified'],
    ['http://[::1]:8080/', 'loopback'],
    ['http://[0:0:0:0:0:0:0:1]/', 'loopback'],
    ['http://[::ffff:127.0.0.1]/', 'loopback via IPv4-mapped'],
    ['http://[::ffff:a9fe:a9fe]/', 'link-local (metadata) via IPv4-mapped'],
    ['http://[::127.0.0.1]/', 'reserved (IPv4-compatible)'],
    ['http://[fd00:ec2::254]/latest/meta-data/', 'unique-local (metadata)'],
    ['http://169.254.169.254/latest/meta-data/', 'link-local (metadata)'],
    ['http://2852039166/', 'link-local (metadata)'],
    ['http://0xa9.0xfe.0xa9.0xfe/', 'link-local (metadata)'],
    ['http://10.0.0.1/', 'private'],
    ['http://012.0.0.1/', 'private'],
    ['https://8.8.8.8/hook', 'allowed'],
    ['https://[2606:4700:4700::1111]/hook', 'allowed'],
    ['https://hooks.example.com/hook', 'name'],
    ['http://localhost:3000/', 'name'],
  ])('%s → %s', (url, expected) => {
    expect(verdict(url)).toBe(expected);
  });
});
