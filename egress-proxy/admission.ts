// Admission of one destination: parse host:port, check names before DNS,
// resolve once, check the resolved address, and return the one address to
// connect to. No I/O besides the injected resolver.
import { formatIp, normalizeIp, parseIp, type IpAddr } from './address.js';
import { checkDestination, checkHostname, type CompiledPolicy, type Refusal } from './allowlist.js';
import type { RefusalKind } from './refusals.js';
import type { Target } from './runtime.js';

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}
/** Injectable DNS lookup (default: the host resolver via dns.promises.lookup). */
export type Resolver = (hostname: string) => Promise<ResolvedAddress[]>;

export type Admission =
  | { ok: true; target: Target }
  | {
      ok: false;
      kind: Extract<
        RefusalKind,
        | 'bad_target'
        | 'not_in_profile'
        | 'not_in_declaration'
        | 'special_address'
        | 'resolve_failed'
        | 'resolve_timeout'
      >;
      detail: string;
    };

const refusalText = (r: Refusal): string =>
  r.reason === 'special_address'
    ? `destination address is ${r.kind.replace('_', '-')} and no rule names it explicitly`
    : r.reason === 'not_in_profile'
      ? 'destination is not allowed by the egress profile'
      : 'destination is not in the Capsulefile egress_declaration';

/** Splits "host:port" / "[v6]:port" (CONNECT authority form). */
export function splitAuthority(authority: string): { host: string; port: number } | null {
  const m = /^\[([^\]]+)\]:(\d{1,5})$/.exec(authority) ?? /^([^:[\]]+):(\d{1,5})$/.exec(authority);
  if (!m) return null;
  return { host: m[1] as string, port: Number(m[2]) };
}

function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<T>((_, reject) => {
      timer = setTimeout(() => reject(Object.assign(new Error('resolve timed out'), { code: 'ETIMEOUT' })), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

export async function admit(
  policy: CompiledPolicy,
  resolver: Resolver,
  resolveTimeoutMs: number,
  scheme: 'http' | 'https',
  rawHost: string,
  port: number,
): Promise<Admission> {
  if (!Number.isInteger(port) || port < 1 || port > 65535)
    return { ok: false, kind: 'bad_target', detail: 'port out of range' };
  const literal = parseIp(rawHost);
  if (literal) {
    const host = formatIp(literal);
    const r = checkDestination(policy, { host, hostIsIp: true, port, address: literal });
    if (r) return { ok: false, kind: r.reason, detail: refusalText(r) };
    // An IPv4-mapped IPv6 literal is connected to as the IPv4 address it maps (the one that was checked).
    return { ok: true, target: { scheme, host, hostIsIp: true, port, address: formatIp(normalizeIp(literal)) } };
  }
  const name = checkHostname(rawHost);
  if (!name.ok || name.value.startsWith('*.')) return { ok: false, kind: 'bad_target', detail: 'not a valid hostname' };
  const host = name.value;
  // Before DNS: an unlisted name is never looked up.
  const pre = checkDestination(policy, { host, hostIsIp: false, port });
  if (pre) return { ok: false, kind: pre.reason, detail: refusalText(pre) };
  let resolved: ResolvedAddress[];
  try {
    resolved = await withTimeout(resolver(host), resolveTimeoutMs);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code ?? 'ERROR';
    return {
      ok: false,
      kind: code === 'ETIMEOUT' ? 'resolve_timeout' : 'resolve_failed',
      detail: `could not resolve (${code})`,
    };
  }
  let first: Refusal | null = null;
  for (const a of resolved) {
    const ip: IpAddr | null = parseIp(a.address);
    if (!ip) continue;
    const r = checkDestination(policy, { host, hostIsIp: false, port, address: ip });
    if (!r) return { ok: true, target: { scheme, host, hostIsIp: false, port, address: formatIp(normalizeIp(ip)) } };
    first ??= r;
  }
  if (!first) return { ok: false, kind: 'resolve_failed', detail: 'no address' };
  return { ok: false, kind: first.reason, detail: refusalText(first) };
}
