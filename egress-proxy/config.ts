// The proxy's configuration: one typed object, validated once at start.
// Defaults for clock and resolver live here too (the only I/O is the
// default resolver's DNS lookup).
import { X509Certificate } from 'node:crypto';
import { lookup } from 'node:dns/promises';
import type { Resolver } from './admission.js';
import type { ByteBudget } from './budget.js';
import type { Rule } from './allowlist.js';
import type { EgressEvent, EgressRefusal } from './events.js';
import { checkMcpPolicy, type McpPolicy } from './mcp-policy.js';
import type { EgressClock, EgressLimits } from './runtime.js';
import { nowIsoMicros } from '../shared/time.js';

export interface EgressProxyConfig {
  capsuleId: string;
  /** Unix socket the capsule-side relay connects to (created 0600; a stale socket file is replaced). */
  socketPath?: string;
  /** Loopback TCP listener, for tests and benchmarks. Port 0 picks a free port. */
  tcp?: { host: '127.0.0.1' | '::1'; port: number };
  /** Runtime egress profile rules (validated again here; invalid config throws). */
  profileRules: Rule[];
  /** Capsulefile egress_declaration entries. */
  declaration: string[];
  /** Capsulefile mcp_policy; absent = unrestricted at tool level. */
  mcpPolicy?: McpPolicy;
  /** PEM of extra upstream trust anchors (the caller reads CAPSULE_EGRESS_EXTRA_CA). */
  extraCaPem?: string;
  resolver?: Resolver;
  clock?: EgressClock;
  /** Randomness for certificate serial numbers. */
  random?: (n: number) => Uint8Array;
  /**
   * Activity events, in emission order. Must not throw (a throw is swallowed and counted). A returned
   * promise settles when the event is stored: the proxy keeps at most limits.maxQueuedEvents unsettled.
   */
  onEvent: (event: EgressEvent) => unknown;
  /** Refused requests (not activity events): for operator logs/metrics. Carries no customer bytes. */
  onRefusal?: (refusal: EgressRefusal) => void;
  limits?: Partial<EgressLimits>;
  /** Inspection budget shared by every proxy of the process (besides the capsule's own limits.inspectBudgetBytes). */
  processInspectBudget?: ByteBudget;
}

/** Default wall/monotonic clock; RFC 3339 with six fraction digits. */
export const systemClock: EgressClock = {
  nowIso: nowIsoMicros,
  monoMs: () => performance.now(),
};

export const systemResolver: Resolver = async (hostname) =>
  (await lookup(hostname, { all: true, verbatim: true })).map((a) => ({
    address: a.address,
    family: a.family === 6 ? 6 : 4,
  }));

export function validateConfig(c: EgressProxyConfig): void {
  if (!c || typeof c !== 'object') throw new TypeError('egress proxy config: must be an object');
  if (typeof c.capsuleId !== 'string' || c.capsuleId.length === 0)
    throw new TypeError('egress proxy config: capsuleId is required');
  if (!c.socketPath && !c.tcp) throw new TypeError('egress proxy config: socketPath or tcp is required');
  if (c.tcp && c.tcp.host !== '127.0.0.1' && c.tcp.host !== '::1')
    throw new TypeError('egress proxy config: tcp.host must be loopback');
  if (typeof c.onEvent !== 'function') throw new TypeError('egress proxy config: onEvent is required');
  if (!Array.isArray(c.profileRules) || !Array.isArray(c.declaration))
    throw new TypeError('egress proxy config: profileRules and declaration must be arrays');
  if (c.extraCaPem !== undefined) {
    // OpenSSL silently skips unparsable PEM, which would leave the operator's CA untrusted without a word.
    const blocks =
      typeof c.extraCaPem === 'string'
        ? c.extraCaPem.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g)
        : null;
    if (!blocks) throw new TypeError('egress proxy config: extraCaPem holds no PEM certificate');
    for (const b of blocks) {
      try {
        new X509Certificate(b);
      } catch {
        throw new TypeError('egress proxy config: extraCaPem holds a certificate that does not parse');
      }
    }
  }
  if (c.mcpPolicy !== undefined) {
    const m = checkMcpPolicy(c.mcpPolicy);
    if (!m.ok) throw new TypeError(`egress proxy config: ${m.message}`);
  }
}
