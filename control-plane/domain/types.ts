// Domain records of the control plane. Types only: no I/O.
import type { EgressRuleKind } from '../../shared/egress-rules.js';

export const TIERS = ['free', 'starter', 'business', 'enterprise'] as const;
export type Tier = (typeof TIERS)[number];

export const JURISDICTIONS = ['US', 'EU', 'UK', 'CA', 'AU', 'IN', 'OTHER'] as const;
export type Jurisdiction = (typeof JURISDICTIONS)[number];

export const DATA_CLASSIFICATIONS = ['general', 'PHI', 'PII', 'financial', 'credentials'] as const;
export type DataClassification = (typeof DATA_CLASSIFICATIONS)[number];

export const CAPSULE_STATUSES = ['active', 'executing', 'destroyed', 'expired', 'expired_unclean'] as const;
export type CapsuleStatus = (typeof CAPSULE_STATUSES)[number];
/** Statuses in which the capsule still exists on a runner. */
export const LIVE_STATUSES: readonly CapsuleStatus[] = ['active', 'executing'];

/** Which wire form created the capsule: the capsule API or the session-named variant. */
export type ApiForm = 'capsule' | 'session';

export interface Limits {
  capsules_per_month: number;
  max_ttl_seconds: number;
  concurrent_capsules: number;
  rate_limit_rpm: number;
  /** Bound on one upload body (413 above it); the runner and capsule tmpfs bound it too. */
  upload_max_bytes: number;
  /** Proofs per billing cycle; null = unlimited (SPEC: `cdp_limit`). */
  cdp_limit: number | null;
}

export interface Account {
  customer_id: string;
  email: string;
  tier: Tier;
  jurisdiction: Jurisdiction;
  created_at: string;
  billing_cycle_start: string;
  capsules_used_this_month: number;
  cdps_this_cycle: number;
  live_capsules: number;
}

export type KeyMode = 'live' | 'test';

/** MFA state of an account as seen at authentication. */
export type MfaState = 'none' | 'pending' | 'active';

/** The authenticated caller: the account plus the key it used. */
export interface Caller {
  account: Account;
  key_mode: KeyMode;
  /** `key_...` id of the calling key. */
  key_id: string;
  mfa: MfaState;
  /** Until when the calling key counts as MFA-verified (ISO), or null. */
  mfa_verified_until: string | null;
}

/** An API key as listed (never the key or its hash). */
export interface ApiKeyRecord {
  id: string;
  customer_id: string;
  /** First 12 characters of the key (`svc_live_ab3`). */
  prefix: string;
  mode: KeyMode;
  created_at: string;
  last_used_at: string | null;
  /** When the key stopped (or, during a rotation grace, will stop) working; null = active. */
  revoked_at: string | null;
}

/** The events a usage item records (one item per billable event). */
export const USAGE_KINDS = ['capsule', 'proof', 'exec', 'egress_request'] as const;
export type UsageKind = (typeof USAGE_KINDS)[number];

/** Unit of each kind's `quantity` (integers only: exec time in milliseconds). */
export const USAGE_UNITS: Record<UsageKind, string> = {
  capsule: 'capsule',
  proof: 'proof',
  exec: 'millisecond',
  egress_request: 'request',
};

/** A usage item to write beside its billable event; customer and billability come from the capsule. */
export interface UsageEntry {
  id: string;
  kind: UsageKind;
  quantity: number;
  at: string;
}

/** Events and summed quantity per kind. */
export type UsageCounts = Record<UsageKind, { events: number; quantity: number }>;

export interface UsageItem {
  id: string;
  customer_id: string;
  kind: UsageKind;
  capsule_id: string;
  quantity: number;
  /** False for capsules started with a test key. */
  billable: boolean;
  created_at: string;
}

export interface Capsule {
  id: string;
  customer_id: string;
  status: CapsuleStatus;
  api_form: ApiForm;
  ttl_seconds: number;
  created_at: string;
  expires_at: string;
  data_classification: DataClassification;
  jurisdiction: Jurisdiction;
  capsulefile_id: string | null;
  /** Content hash of the pinned Capsulefile, kept on the capsule so proofs outlive the Capsulefile. */
  capsulefile_content_hash: string | null;
  /** Egress profile whose rules the capsule's sealed egress layer enforces; null = loopback only. */
  egress_profile_id: string | null;
  metadata: Record<string, string>;
  execution_count: number;
  bytes_processed: number;
  destroyed_at: string | null;
  /** Whether proofs from this capsule are billable (live key). */
  billable: boolean;
}

export interface StoredProof {
  proof_id: string;
  capsule_id: string;
  customer_id: string;
  /** The AuditRecord as emitted (JSON object). */
  record: Record<string, unknown>;
  /** Destroy response body as first answered (replayed on lookups that need it). */
  response: Record<string, unknown> | null;
  partial: boolean;
  created_at: string;
}

/**
 * A destruction whose wipe is done and stored but whose proof waits for the
 * managed signing key (phase 1 of two-phase signing, docs/CONTROL_PLANE.md
 * "Signing authority"). Phase 2 signs `input` as it is: nothing in it changes.
 */
export interface PendingProof {
  capsule_id: string;
  customer_id: string;
  /** Assigned at phase 1, so the capsule's webhook event already names it. */
  proof_id: string;
  partial: boolean;
  billable: boolean;
  /** The emitter's input, timestamps included, fixed when the wipe finished. */
  input: Record<string, unknown>;
  /** The destroy response without `cdp` and `audit_proof`; null for a partial proof. */
  response: Record<string, unknown> | null;
  created_at: string;
  /** Set once, by whichever process stored the signed proof. */
  signed_at: string | null;
}

export interface KeyRecord {
  key_id: string;
  algorithm: 'Ed25519';
  /** Raw base64, no prefix (SPEC: key record endpoint). */
  public_key: string;
  created_at: string;
  signing_authority_id: string;
  signing_key_version: number;
}

/** A stored response of an idempotent POST, replayed for 24 h. */
export interface IdempotentResponse {
  status: number;
  body: string;
  headers: Record<string, string>;
}

/** SPEC "Egress profile and rule". */
export { EGRESS_RULE_KINDS, type EgressRuleKind } from '../../shared/egress-rules.js';

export interface EgressProfile {
  id: string;
  customer_id: string;
  name: string;
  description: string;
  created_at: string;
}

export interface EgressRule {
  id: string;
  profile_id: string;
  customer_id: string;
  kind: EgressRuleKind;
  value: string;
  port: number;
  created_at: string;
}

/** Name of the profile the flat `/v1/egress` endpoints use (created on first use). */
export const DEFAULT_EGRESS_PROFILE_NAME = 'default';
