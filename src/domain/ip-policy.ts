import { isIP } from 'node:net';

/**
 * The SSRF address policy: which IP addresses a callback may never reach. Pure; webhook
 * registration applies it to IP-literal callback hosts, and the HTTP sender to IP-literal hosts
 * before connecting and to every address a name resolves to.
 */

type Rule<T> = { readonly base: T; readonly prefixBits: number; readonly reason: string };

/** IPv4 ranges that are not the public internet, most specific first (first match wins). */
const IPV4_RULES: readonly Rule<number>[] = [
  v4('0.0.0.0', 8, 'unspecified'),
  v4('10.0.0.0', 8, 'private'),
  v4('100.100.100.200', 32, 'cgnat (metadata)'),
  v4('100.64.0.0', 10, 'cgnat'),
  v4('127.0.0.0', 8, 'loopback'),
  v4('169.254.169.254', 32, 'link-local (metadata)'),
  v4('169.254.0.0', 16, 'link-local'),
  v4('172.16.0.0', 12, 'private'),
  v4('192.0.0.192', 32, 'reserved (metadata)'),
  v4('192.0.0.0', 24, 'reserved'),
  v4('192.0.2.0', 24, 'documentation'),
  v4('192.88.99.0', 24, 'reserved'),
  v4('192.168.0.0', 16, 'private'),
  v4('198.18.0.0', 15, 'benchmarking'),
  v4('198.51.100.0', 24, 'documentation'),
  v4('203.0.113.0', 24, 'documentation'),
  v4('224.0.0.0', 4, 'multicast'),
  v4('255.255.255.255', 32, 'broadcast'),
  v4('240.0.0.0', 4, 'reserved'),
];

/** IPv6 prefixes whose last 32 bits (or, for 6to4, bits 16-47) are an IPv4 address that decides. */
const IPV6_EMBEDDING_RULES: readonly (Rule<bigint> & { embedded: (address: bigint) => number })[] = [
  { ...v6('::ffff:0:0', 96, 'IPv4-mapped'), embedded: low32 },
  { ...v6('64:ff9b::', 96, 'NAT64'), embedded: low32 },
  { ...v6('2002::', 16, '6to4'), embedded: (address) => Number((address >> 80n) & 0xffff_ffffn) },
];

/** IPv6 ranges that are not the public internet, most specific first (first match wins). */
const IPV6_RULES: readonly Rule<bigint>[] = [
  v6('::', 128, 'unspecified'),
  v6('::1', 128, 'loopback'),
  // IPv4-compatible addresses are deprecated (RFC 4291) and never routed, so the embedded v4 does not matter.
  v6('::', 96, 'reserved (IPv4-compatible)'),
  v6('64:ff9b:1::', 48, 'reserved (local NAT64)'),
  v6('100::', 64, 'reserved (discard-only)'),
  v6('2001::', 32, 'teredo'),
  v6('2001:2::', 48, 'benchmarking'),
  v6('2001:10::', 28, 'reserved (ORCHID)'),
  v6('2001:20::', 28, 'reserved (ORCHID)'),
  v6('2001:db8::', 32, 'documentation'),
  v6('3fff::', 20, 'documentation'),
  v6('fd00:ec2::254', 128, 'unique-local (metadata)'),
  v6('fd20:ce::254', 128, 'unique-local (metadata)'),
  v6('fc00::', 7, 'unique-local'),
  v6('fe80::', 10, 'link-local'),
  v6('fec0::', 10, 'site-local'),
  v6('ff00::', 8, 'multicast'),
];

/** Global unicast; everything outside it that no rule names is IANA-reserved. */
const IPV6_GLOBAL_UNICAST = v6('2000::', 3, 'global unicast');

/**
 * Why a callback must not connect to `ip` (`loopback`, `private`, `link-local (metadata)`, …), or
 * undefined when it is a public address. IPv6 forms that carry an IPv4 address (IPv4-mapped,
 * NAT64, 6to4) are judged by that address; text that is not an IP address is blocked.
 */
export function blockedAddressReason(ip: string): string | undefined {
  const family = isIP(ip);
  if (family === 4) return ipv4Reason(parseIPv4(ip));
  if (family === 6) return ipv6Reason(parseIPv6(ip));
  return 'not an IP address';
}

/**
 * The IP address in a WHATWG `url.hostname` (`[::1]` → `::1`, `127.0.0.1` → itself), or undefined
 * for a name. WHATWG has already rewritten decimal, octal and hex IPv4 spellings to dotted form.
 */
export function parseIpLiteralHost(hostname: string): string | undefined {
  if (hostname.startsWith('[') && hostname.endsWith(']')) {
    const inner = hostname.slice(1, -1);
    return isIP(inner) === 6 ? inner : undefined;
  }
  return isIP(hostname) === 0 ? undefined : hostname;
}

function ipv4Reason(address: number): string | undefined {
  return IPV4_RULES.find((rule) => inPrefix(BigInt(address), BigInt(rule.base), rule.prefixBits, 32))?.reason;
}

function ipv6Reason(address: bigint): string | undefined {
  for (const rule of IPV6_EMBEDDING_RULES) {
    if (inPrefix(address, rule.base, rule.prefixBits, 128)) {
      const reason = ipv4Reason(rule.embedded(address));
      return reason === undefined ? undefined : `${reason} via ${rule.reason}`;
    }
  }
  const named = IPV6_RULES.find((rule) => inPrefix(address, rule.base, rule.prefixBits, 128));
  if (named) return named.reason;
  return inPrefix(address, IPV6_GLOBAL_UNICAST.base, IPV6_GLOBAL_UNICAST.prefixBits, 128) ? undefined : 'reserved';
}

function inPrefix(address: bigint, base: bigint, prefixBits: number, totalBits: number): boolean {
  const shift = BigInt(totalBits - prefixBits);
  return address >> shift === base >> shift;
}

function low32(address: bigint): number {
  return Number(address & 0xffff_ffffn);
}

/** Dotted-quad text (already validated by isIP) as an unsigned 32-bit number. */
function parseIPv4(text: string): number {
  return text.split('.').reduce((acc, octet) => acc * 256 + Number(octet), 0);
}

/** IPv6 text (already validated by isIP; any zone id is dropped) as a 128-bit number. */
function parseIPv6(text: string): bigint {
  let rest = text.split('%')[0] ?? '';
  const groups: number[] = [];
  // A trailing dotted quad stands for the last two 16-bit groups.
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(rest);
  let tail: number[] = [];
  if (dotted?.[1] !== undefined) {
    const v4 = parseIPv4(dotted[1]);
    tail = [v4 >>> 16, v4 & 0xffff];
    rest = rest.slice(0, -dotted[1].length);
    if (rest.endsWith(':') && !rest.endsWith('::')) rest = rest.slice(0, -1);
  }
  const hex = (part: string) => (part === '' ? [] : part.split(':').map((g) => parseInt(g, 16)));
  const gap = rest.indexOf('::');
  if (gap === -1) {
    groups.push(...hex(rest), ...tail);
  } else {
    const head = hex(rest.slice(0, gap));
    const after = [...hex(rest.slice(gap + 2)), ...tail];
    groups.push(...head, ...new Array<number>(8 - head.length - after.length).fill(0), ...after);
  }
  return groups.reduce((acc, group) => (acc << 16n) | BigInt(group), 0n);
}

function v4(text: string, prefixBits: number, reason: string): Rule<number> {
  return { base: parseIPv4(text), prefixBits, reason };
}

function v6(text: string, prefixBits: number, reason: string): Rule<bigint> {
  return { base: parseIPv6(text), prefixBits, reason };
}
