// IP address and CIDR arithmetic, and the special-purpose ranges the proxy
// refuses unless a rule names them. Pure functions: no I/O, no DNS.
import { isIPv4, isIPv6 } from 'node:net';

/** An IP address as a 128-bit (v6) or 32-bit (v4) unsigned integer. */
export interface IpAddr {
  family: 4 | 6;
  value: bigint;
}

export interface Cidr {
  family: 4 | 6;
  base: bigint; // network address (host bits cleared)
  prefix: number;
}

const BITS = { 4: 32, 6: 128 } as const;

export function parseIp(text: string): IpAddr | null {
  if (isIPv4(text)) {
    const parts = text.split('.').map(Number);
    let v = 0n;
    for (const p of parts) v = (v << 8n) | BigInt(p);
    return { family: 4, value: v };
  }
  // Zone ids (fe80::1%eth0) are refused: they name an interface, not an address.
  if (isIPv6(text) && !text.includes('%')) return { family: 6, value: parseV6(text) };
  return null;
}

function parseV6(text: string): bigint {
  let head = text;
  let tailV4: bigint | null = null;
  const lastColon = text.lastIndexOf(':');
  const last = text.slice(lastColon + 1);
  if (last.includes('.')) {
    tailV4 = (parseIp(last) as IpAddr).value;
    head = text.slice(0, lastColon + 1) + '0:0';
  }
  const [left = '', right] = head.split('::');
  const l = left === '' ? [] : left.split(':');
  const r = right === undefined ? [] : right === '' ? [] : right.split(':');
  const groups = right === undefined ? l : [...l, ...Array(8 - l.length - r.length).fill('0'), ...r];
  let v = 0n;
  for (const g of groups) v = (v << 16n) | BigInt(parseInt(g, 16));
  if (tailV4 !== null) v = (v & ~0xffffffffn) | tailV4;
  return v;
}

export function formatIp(ip: IpAddr): string {
  if (ip.family === 4) {
    const v = Number(ip.value);
    return [v >>> 24, (v >>> 16) & 255, (v >>> 8) & 255, v & 255].join('.');
  }
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((ip.value >> BigInt(i * 16)) & 0xffffn).toString(16));
  // RFC 5952: compress the longest run (length >= 2) of zero groups.
  let best = -1,
    bestLen = 0;
  for (let i = 0; i < 8;) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > bestLen && j - i >= 2) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  if (best < 0) return groups.join(':');
  return `${groups.slice(0, best).join(':')}::${groups.slice(best + bestLen).join(':')}`;
}

/** Parses "a.b.c.d/n" or "x::/n"; host bits must be zero. Returns an error string instead of throwing. */
export function parseCidr(text: string): Cidr | string {
  const slash = text.indexOf('/');
  if (slash < 0) return 'expected address/prefix';
  const ip = parseIp(text.slice(0, slash));
  if (!ip) return 'not an IP address before "/"';
  const prefixText = text.slice(slash + 1);
  if (!/^\d{1,3}$/.test(prefixText)) return 'prefix length is not a number';
  const prefix = Number(prefixText);
  if (prefix > BITS[ip.family]) return `prefix length exceeds ${BITS[ip.family]}`;
  const base = ip.value & mask(ip.family, prefix);
  if (base !== ip.value) return 'host bits set after the prefix';
  return { family: ip.family, base, prefix };
}

function mask(family: 4 | 6, prefix: number): bigint {
  const bits = BigInt(BITS[family]);
  const all = (1n << bits) - 1n;
  return prefix === 0 ? 0n : (all << (bits - BigInt(prefix))) & all;
}

export function cidrContains(c: Cidr, ip: IpAddr): boolean {
  return c.family === ip.family && (ip.value & mask(c.family, c.prefix)) === c.base;
}

/** c is entirely inside outer. */
export function cidrWithin(c: Cidr, outer: Cidr): boolean {
  return (
    c.family === outer.family && c.prefix >= outer.prefix && (c.base & mask(c.family, outer.prefix)) === outer.base
  );
}

/**
 * An IPv4-mapped IPv6 address (::ffff:a.b.c.d) reaches the IPv4 host, so it
 * is classified and matched as that IPv4 address.
 */
export function normalizeIp(ip: IpAddr): IpAddr {
  if (ip.family === 6 && ip.value >> 32n === 0xffffn) return { family: 4, value: ip.value & 0xffffffffn };
  return ip;
}

export type SpecialKind = 'loopback' | 'link_local' | 'metadata' | 'unspecified' | 'multicast' | 'broadcast';

const cidr = (t: string): Cidr => parseCidr(t) as Cidr;

/**
 * Ranges refused unless a rule names them (SPEC egress model; docs/EGRESS.md).
 * Metadata comes first so that 169.254.169.254 reports as metadata, not link-local.
 */
export const SPECIAL_RANGES: readonly { kind: SpecialKind; range: Cidr; why: string }[] = [
  { kind: 'metadata', range: cidr('169.254.169.254/32'), why: 'cloud instance metadata (AWS, GCP, Azure, OpenStack)' },
  { kind: 'metadata', range: cidr('100.100.100.200/32'), why: 'Alibaba Cloud instance metadata' },
  { kind: 'metadata', range: cidr('fd00:ec2::254/128'), why: 'AWS instance metadata over IPv6' },
  { kind: 'unspecified', range: cidr('0.0.0.0/8'), why: '"this network"; 0.0.0.0 reaches the local host on Linux' },
  { kind: 'unspecified', range: cidr('::/128'), why: 'unspecified IPv6 address, reaches the local host' },
  { kind: 'loopback', range: cidr('127.0.0.0/8'), why: 'host loopback: the proxy host itself' },
  { kind: 'loopback', range: cidr('::1/128'), why: 'IPv6 loopback' },
  { kind: 'link_local', range: cidr('169.254.0.0/16'), why: 'IPv4 link-local' },
  { kind: 'link_local', range: cidr('fe80::/10'), why: 'IPv6 link-local' },
  { kind: 'multicast', range: cidr('224.0.0.0/4'), why: 'IPv4 multicast' },
  { kind: 'multicast', range: cidr('ff00::/8'), why: 'IPv6 multicast' },
  { kind: 'broadcast', range: cidr('255.255.255.255/32'), why: 'limited broadcast' },
];

/** The special range an address falls in, or null for an ordinary address. */
export function specialRange(ip: IpAddr): { kind: SpecialKind; range: Cidr } | null {
  const n = normalizeIp(ip);
  for (const s of SPECIAL_RANGES) if (cidrContains(s.range, n)) return s;
  return null;
}

/**
 * Private-use ranges (RFC 1918, RFC 6598 shared address space, RFC 4193
 * unique local). The sealed egress proxy reaches them only when a rule names
 * them; webhook delivery refuses them unless the operator allows private receivers.
 */
export const PRIVATE_RANGES: readonly { range: Cidr; why: string }[] = [
  { range: cidr('10.0.0.0/8'), why: 'RFC 1918 private network' },
  { range: cidr('172.16.0.0/12'), why: 'RFC 1918 private network' },
  { range: cidr('192.168.0.0/16'), why: 'RFC 1918 private network' },
  { range: cidr('100.64.0.0/10'), why: 'RFC 6598 carrier-grade NAT shared space' },
  { range: cidr('fc00::/7'), why: 'RFC 4193 unique local IPv6' },
];

/** What an address is, for callers that refuse non-public destinations: a special kind, 'private' or 'public'. */
export function addressClass(ip: IpAddr): SpecialKind | 'private' | 'public' {
  const s = specialRange(ip);
  if (s) return s.kind;
  const n = normalizeIp(ip);
  return PRIVATE_RANGES.some((p) => cidrContains(p.range, n)) ? 'private' : 'public';
}
