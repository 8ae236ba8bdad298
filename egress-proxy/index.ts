// Public surface of the sealed egress proxy. Other folders import
// only from here.
export { startEgressProxy } from './proxy.js';
export type { EgressProxy } from './proxy.js';
export { systemClock, systemResolver } from './config.js';
export type { EgressProxyConfig } from './config.js';
export type { Resolver, ResolvedAddress } from './admission.js';
export type { EgressClock, EgressLimits } from './runtime.js';
export { DEFAULT_LIMITS } from './runtime.js';
export { ByteBudget } from './budget.js';
export type { KeyDestructionEvidence } from './ca.js';
export { combineSegmentRoots, segmentCount, SEGMENTS_PER_LEVEL } from './segments.js';
export type {
  ActivityTruncated,
  EgressEvent,
  EgressOutcome,
  EgressRefusal,
  McpOutcome,
  McpToolInvoked,
  SealedHttpRequest,
  Sha512,
  StreamingEgressChunk,
  StreamingEgressCompleted,
  StreamingEgressStarted,
  TlsMetadata,
} from './events.js';
// Validation for the control plane's profile/rule and Capsulefile endpoints.
export { RULE_KINDS, checkDeclarationEntry, checkHostname, checkRule } from './allowlist.js';
export type { Checked, FieldProblem, Rule, RuleKind } from './allowlist.js';
export { checkMcpPolicy } from './mcp-policy.js';
export type { McpPolicy } from './mcp-policy.js';
// Hash definitions a verifier or the recorder may need to recompute.
export { CANONICAL_HEADERS, canonicalRequest, requestCanonicalHash } from './hashing.js';
// Address classification, shared with the control plane's webhook delivery (SSRF refusal).
export { addressClass, parseIp } from './address.js';
export type { IpAddr, SpecialKind } from './address.js';
