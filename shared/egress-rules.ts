// Egress rule kinds (SPEC "Egress profile and rule"): the wire enum shared by
// the control plane's API and the egress proxy's destination check.
export const EGRESS_RULE_KINDS = ['domain', 'ip_v4', 'ip_v6', 'cidr_v4', 'cidr_v6'] as const;
export type EgressRuleKind = (typeof EGRESS_RULE_KINDS)[number];
