// Classifies one `egress_declaration` entry: a hostname, an IP address or a
// CIDR block. Kinds use the egress rule names of the SPEC so the sealed
// egress layer can match on them. Pure and isomorphic: no DNS, no Node modules.

export type EgressEntryKind = 'domain' | 'ip_v4' | 'ip_v6' | 'cidr_v4' | 'cidr_v6';
export type EgressEntryCheck = { ok: true; kind: EgressEntryKind } | { ok: false; why: string };

const LABEL = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;

/** Lower-case DNS name, no trailing dot, no wildcard, no port; last label not all digits. */
function checkHostname(s: string): string | null {
  if (s.length > 253) return 'hostname longer than 253 characters';
  if (s !== s.toLowerCase()) return 'hostnames must be lower-case';
  if (s.includes(':')) return 'ports are not part of an egress declaration';
  if (s.startsWith('*')) return 'wildcards are not supported; list each hostname';
  const labels = s.split('.');
  for (const l of labels) if (!LABEL.test(l)) return `"${l}" is not a valid hostname label`;
  if (/^[0-9]+$/.test(labels[labels.length - 1] ?? '')) return 'not a valid hostname or IP address';
  return null;
}

const OCTET = '(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])';
const IPV4 = new RegExp(`^${OCTET}(?:\\.${OCTET}){3}$`);

/** Dotted-quad IPv4 without leading zeros. */
export const isIPv4 = (s: string): boolean => IPV4.test(s);

function ipv4ToInt(addr: string): number {
  return addr.split('.').reduce((acc, o) => acc * 256 + Number(o), 0);
}

/** 128-bit value of an IPv6 literal (RFC 4291 text forms, optional IPv4 tail), or null. */
export function parseIPv6(addr: string): bigint | null {
  let a = addr;
  const v4 = /^(.*:)([0-9.]+)$/.exec(a);
  if (v4 && a.includes('.')) {
    const tail = v4[2] ?? '';
    if (!isIPv4(tail)) return null;
    const o = tail.split('.').map(Number) as [number, number, number, number];
    a = `${v4[1] ?? ''}${((o[0] << 8) | o[1]).toString(16)}:${((o[2] << 8) | o[3]).toString(16)}`;
  }
  const halves = a.split('::');
  if (halves.length > 2) return null;
  const group = /^[0-9a-fA-F]{1,4}$/;
  const split = (h: string): string[] | null => {
    if (h === '') return [];
    const g = h.split(':');
    return g.every((x) => group.test(x)) ? g : null;
  };
  const head = split(halves[0] ?? '');
  const tail = halves.length === 2 ? split(halves[1] ?? '') : [];
  if (head === null || tail === null) return null;
  let groups: string[];
  if (halves.length === 2) {
    if (head.length + tail.length > 7) return null;
    groups = [...head, ...new Array<string>(8 - head.length - tail.length).fill('0'), ...tail];
  } else {
    if (head.length !== 8) return null;
    groups = head;
  }
  return groups.reduce((acc, g) => (acc << 16n) | BigInt(parseInt(g, 16)), 0n);
}

export const isIPv6 = (s: string): boolean => parseIPv6(s) !== null;

export function checkEgressEntry(entry: string): EgressEntryCheck {
  if (entry.length === 0) return { ok: false, why: 'must not be empty' };
  if (entry.trim() !== entry) return { ok: false, why: 'must not have surrounding whitespace' };
  if (entry.includes('%')) return { ok: false, why: 'IPv6 zone ids are not allowed' };
  const slash = entry.indexOf('/');
  if (slash >= 0) {
    const addr = entry.slice(0, slash);
    const prefixText = entry.slice(slash + 1);
    if (!/^(0|[1-9][0-9]{0,2})$/.test(prefixText))
      return { ok: false, why: 'CIDR prefix length must be a decimal number' };
    const prefix = Number(prefixText);
    if (isIPv4(addr)) {
      if (prefix > 32) return { ok: false, why: 'IPv4 CIDR prefix length must be 0 to 32' };
      const hostBits = 32 - prefix;
      const v = ipv4ToInt(addr);
      if (hostBits > 0 && v % 2 ** hostBits !== 0)
        return { ok: false, why: 'CIDR has host bits set; use the network address' };
      return { ok: true, kind: 'cidr_v4' };
    }
    if (isIPv6(addr)) {
      if (prefix > 128) return { ok: false, why: 'IPv6 CIDR prefix length must be 0 to 128' };
      const hostBits = BigInt(128 - prefix);
      const v = parseIPv6(addr) ?? 0n;
      if ((v & ((1n << hostBits) - 1n)) !== 0n)
        return { ok: false, why: 'CIDR has host bits set; use the network address' };
      return { ok: true, kind: 'cidr_v6' };
    }
    return { ok: false, why: 'CIDR must be an IPv4 or IPv6 address, "/", and a prefix length' };
  }
  if (isIPv4(entry)) return { ok: true, kind: 'ip_v4' };
  if (isIPv6(entry)) return { ok: true, kind: 'ip_v6' };
  const bad = checkHostname(entry);
  return bad === null ? { ok: true, kind: 'domain' } : { ok: false, why: bad };
}
