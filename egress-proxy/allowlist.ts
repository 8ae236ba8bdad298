// Destination policy: egress profile rules AND the Capsulefile
// egress_declaration must both allow host:port. Pure functions; the proxy
// calls checkDestination with the one address it resolved and will connect to.
import {
  cidrContains,
  cidrWithin,
  formatIp,
  normalizeIp,
  parseCidr,
  parseIp,
  specialRange,
  type Cidr,
  type IpAddr,
  type SpecialKind,
} from './address.js';
import { EGRESS_RULE_KINDS as RULE_KINDS, type EgressRuleKind as RuleKind } from '../shared/egress-rules.js';

export { RULE_KINDS, type RuleKind };

/** An egress profile rule as the API stores it (SPEC "Egress profile and rule"). */
export interface Rule {
  kind: RuleKind;
  value: string;
  port: number;
}

/** Validation failure: the field it concerns and a message safe to show the customer. */
export interface FieldProblem {
  field: string;
  message: string;
}

export type Checked<T> = { ok: true; value: T } | { ok: false; problem: FieldProblem };

const fail = <T>(field: string, why: string): Checked<T> => ({
  ok: false,
  problem: { field, message: `${field}: ${why}` },
});

const LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/;

/** Lower-cases, drops one trailing dot, allows a leading "*." wildcard. Returns the normalized name or an error. */
export function checkHostname(text: string): Checked<string> & { wildcard?: boolean } {
  if (typeof text !== 'string' || text.length === 0) return fail('value', 'hostname is empty');
  if (/[\s]/.test(text)) return fail('value', 'hostname contains whitespace');
  if (/[^\x21-\x7e]/.test(text))
    return fail('value', 'hostname must be ASCII (use the punycode form of an internationalized name)');
  let name = text.toLowerCase();
  if (name.endsWith('.')) name = name.slice(0, -1);
  const wildcard = name.startsWith('*.');
  const bare = wildcard ? name.slice(2) : name;
  if (bare.length === 0 || bare.length > 253) return fail('value', 'hostname length must be 1 to 253');
  if (parseIp(bare) || /^[\d.]+$/.test(bare))
    return fail('value', 'an IP address is not a hostname (use kind ip_v4 or ip_v6)');
  for (const label of bare.split('.')) {
    if (!LABEL.test(label)) return fail('value', `invalid hostname label "${label.slice(0, 63)}"`);
  }
  return { ok: true, value: name, wildcard };
}

function checkPort(port: unknown): Checked<number> {
  if (typeof port !== 'number' || !Number.isInteger(port)) return fail('port', 'must be an integer');
  if (port < 1 || port > 65535) return fail('port', 'must be between 1 and 65535');
  return { ok: true, value: port };
}

/**
 * Validates and normalizes one profile rule (API input). The control plane
 * maps a problem to 400 invalid_parameters naming `problem.field`.
 */
export function checkRule(input: unknown): Checked<Rule> {
  if (typeof input !== 'object' || input === null) return fail('rule', 'must be an object with kind, value, port');
  const { kind, value, port } = input as Record<string, unknown>;
  if (typeof kind !== 'string' || !(RULE_KINDS as readonly string[]).includes(kind)) {
    return fail('kind', `must be one of ${RULE_KINDS.join(', ')}`);
  }
  if (typeof value !== 'string') return fail('value', 'must be a string');
  const p = checkPort(port);
  if (!p.ok) return p;
  const v = checkRuleValue(kind as RuleKind, value);
  if (!v.ok) return v;
  return { ok: true, value: { kind: kind as RuleKind, value: v.value, port: p.value } };
}

function checkRuleValue(kind: RuleKind, value: string): Checked<string> {
  if (/\s/.test(value)) return fail('value', 'contains whitespace');
  switch (kind) {
    case 'domain':
      return checkHostname(value);
    case 'ip_v4':
    case 'ip_v6': {
      const ip = parseIp(value);
      const want = kind === 'ip_v4' ? 4 : 6;
      if (!ip || ip.family !== want) return fail('value', `not an IPv${want} address`);
      return { ok: true, value: formatIp(ip) };
    }
    case 'cidr_v4':
    case 'cidr_v6': {
      const c = parseCidr(value);
      const want = kind === 'cidr_v4' ? 4 : 6;
      if (typeof c === 'string') return fail('value', `not an IPv${want} CIDR (${c})`);
      if (c.family !== want) return fail('value', `not an IPv${want} CIDR`);
      return { ok: true, value: `${formatIp({ family: c.family, value: c.base })}/${c.prefix}` };
    }
  }
}

/**
 * Validates one Capsulefile egress_declaration entry: a hostname (optionally
 * "*."), an IP address, or a CIDR. `index` names the field in the message.
 */
export function checkDeclarationEntry(entry: unknown, index: number): Checked<string> {
  const field = `egress_declaration[${index}]`;
  if (typeof entry !== 'string' || entry.length === 0) return fail(field, 'must be a non-empty string');
  if (/\s/.test(entry)) return fail(field, 'contains whitespace');
  if (entry.includes('/')) {
    const c = parseCidr(entry);
    if (typeof c === 'string') return fail(field, `not a CIDR (${c})`);
    return { ok: true, value: `${formatIp({ family: c.family, value: c.base })}/${c.prefix}` };
  }
  const ip = parseIp(entry);
  if (ip) return { ok: true, value: formatIp(ip) };
  const h = checkHostname(entry);
  if (!h.ok) return fail(field, h.problem.message.replace(/^value: /, ''));
  return { ok: true, value: h.value };
}

// ---- compiled form, built once per proxy ---------------------------------

type Matcher = { type: 'name'; name: string; wildcard: boolean } | { type: 'net'; cidr: Cidr; exactAddress: boolean };

interface CompiledEntry {
  matcher: Matcher;
  port: number | null; /* null: any port */
}

export interface CompiledPolicy {
  profile: CompiledEntry[];
  declaration: CompiledEntry[];
}

function compileValue(kind: 'name' | 'ip' | 'cidr', value: string): Matcher {
  if (kind === 'name') {
    const wildcard = value.startsWith('*.');
    return { type: 'name', name: wildcard ? value.slice(2) : value, wildcard };
  }
  if (kind === 'ip') {
    const ip = normalizeIp(parseIp(value) as IpAddr);
    return {
      type: 'net',
      cidr: { family: ip.family, base: ip.value, prefix: ip.family === 4 ? 32 : 128 },
      exactAddress: true,
    };
  }
  const c = parseCidr(value) as Cidr;
  return { type: 'net', cidr: c, exactAddress: false };
}

/** Compiles validated rules and declaration entries; throws on invalid input (config is validated at start). */
export function compilePolicy(rules: readonly Rule[], declaration: readonly string[]): CompiledPolicy {
  const profile = rules.map((r, i): CompiledEntry => {
    const c = checkRule(r);
    if (!c.ok) throw new Error(`profileRules[${i}].${c.problem.message}`);
    const kind = c.value.kind === 'domain' ? 'name' : c.value.kind.startsWith('ip_') ? 'ip' : 'cidr';
    return { matcher: compileValue(kind, c.value.value), port: c.value.port };
  });
  const decl = declaration.map((d, i): CompiledEntry => {
    const c = checkDeclarationEntry(d, i);
    if (!c.ok) throw new Error(c.problem.message);
    const kind = c.value.includes('/') ? 'cidr' : parseIp(c.value) ? 'ip' : 'name';
    return { matcher: compileValue(kind, c.value), port: null };
  });
  return { profile, declaration: decl };
}

/** The destination as the proxy will reach it: the name asked for, and (once resolved) the one address it connects to. */
export interface Destination {
  /** Lower-case hostname, or the IP literal when the client asked for an address. */
  host: string;
  hostIsIp: boolean;
  port: number;
  /** The address the proxy will connect to; absent for the pre-DNS name check. */
  address?: IpAddr;
}

export type Refusal =
  { reason: 'special_address'; kind: SpecialKind } | { reason: 'not_in_profile' } | { reason: 'not_in_declaration' };

function nameMatches(m: Extract<Matcher, { type: 'name' }>, host: string): boolean {
  return m.wildcard ? host.endsWith(`.${m.name}`) : host === m.name;
}

/**
 * Hostname requests match name entries only, IP-literal requests match
 * address entries only. So a hostname is never resolved unless both lists
 * name it (no DNS lookups, hence no DNS exfiltration, for unlisted names).
 */
function entryAllows(e: CompiledEntry, d: Destination): boolean {
  if (e.port !== null && e.port !== d.port) return false;
  if (e.matcher.type === 'name') return !d.hostIsIp && nameMatches(e.matcher, d.host);
  return d.hostIsIp && d.address !== undefined && cidrContains(e.matcher.cidr, normalizeIp(d.address));
}

/** A special address is unlocked only by an entry that names it: the exact IP, or a CIDR inside the special range. */
function entryNamesSpecial(e: CompiledEntry, port: number, addr: IpAddr, range: Cidr): boolean {
  if (e.port !== null && e.port !== port) return false;
  if (e.matcher.type !== 'net') return false;
  return cidrContains(e.matcher.cidr, addr) && (e.matcher.exactAddress || cidrWithin(e.matcher.cidr, range));
}

/**
 * The destination decision; null = allowed. Called before DNS for a hostname
 * (no address) and again with the resolved address; once for an IP literal.
 * Loopback, link-local, metadata, unspecified, multicast and broadcast
 * addresses are refused unless BOTH lists name the address (or a CIDR inside
 * its special range) explicitly; a domain rule or a broad CIDR never unlocks them.
 */
export function checkDestination(policy: CompiledPolicy, d: Destination): Refusal | null {
  if (d.address) {
    const addr = normalizeIp(d.address);
    const special = specialRange(addr);
    if (special) {
      const named = (list: CompiledEntry[]) => list.some((e) => entryNamesSpecial(e, d.port, addr, special.range));
      if (!named(policy.profile) || !named(policy.declaration))
        return { reason: 'special_address', kind: special.kind };
    }
  }
  if (!policy.profile.some((e) => entryAllows(e, d))) return { reason: 'not_in_profile' };
  if (!policy.declaration.some((e) => entryAllows(e, d))) return { reason: 'not_in_declaration' };
  return null;
}
