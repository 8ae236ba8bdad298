// Proof document types (SPEC "AuditProof document", docs/PROOF_FORMAT.md). Types only.

export type Hash = `sha512:${string}`;

export interface ChainStep {
  step: number;
  subsystem: string;
  operation: string;
  evidence_hash: string;
  chain_hash: string;
}

export interface Attestation {
  algorithm: 'Ed25519';
  public_key: string; // "base64:..."
  key_id: string;
  signature: string; // "base64:..."
}

/** One activity trail event: seq from 1, variant name, timestamp, then its fields. No internal ids. */
export interface ActivityEvent {
  seq: number;
  type: string;
  at: string;
  [field: string]: unknown;
}

/**
 * The customer's co-signature of one activity event (docs/PROOF_FORMAT.md
 * "Customer co-signatures"): record-only, outside the canonical view and the
 * leaf hash. `event_hash` is `sha512:` + hex SHA-512 of JCS(event); the
 * signature (base64) is over the UTF-8 bytes of that string.
 */
export type CustomerAttestation =
  | { seq: number; event_hash: string; algorithm: 'Ed25519' | 'RSA-PSS-SHA256'; signature: string }
  | { seq: number; event_hash: string; status: 'missing' };

/** A destruction step that did not fully happen, and why (docs/PROOF_FORMAT.md "Destruction status"). */
export interface IncompleteStep {
  step: number;
  reason: string;
}

export interface Termination {
  trigger: 'customer_request' | 'ttl_expired' | 'system_restart';
  command_was_running: boolean;
  command_completed?: boolean;
  /** Signed statement of whether every destruction step fully happened (absent in older documents). */
  destruction?: 'complete' | 'incomplete';
  /** Present only when `destruction` is "incomplete". */
  incomplete_steps?: IncompleteStep[];
}

export interface RegulatoryFramework {
  regulation: string;
  provision: string;
  description: string;
  relationship: 'related_to';
}

export interface RegulatoryContext {
  notice: string;
  framework_version: string;
  jurisdiction: string;
  mappings: { step: number; subsystem: string; frameworks: RegulatoryFramework[] }[];
}

export interface CapsuleContext {
  jurisdiction: string;
  data_classification: string;
  capsulefile_id?: string;
  capsulefile_content_hash?: string;
  [field: string]: unknown;
}

/** The shareable AuditProof (cdp_version 2.1 as emitted). */
export interface AuditProof {
  cdp_version: '1.0' | '2.0' | '2.1';
  capsule_id: string;
  created_at: string;
  destroyed_at?: string; // absent on partial proofs
  completeness?: 'complete' | 'partial';
  reason?: string;
  chain: ChainStep[];
  final_hash?: string;
  capsule_context?: CapsuleContext;
  termination?: Termination;
  regulatory_context?: RegulatoryContext;
  component_proofs?: Record<string, string>;
  activity_root?: string;
  signing_authority_id?: string;
  signing_key_version?: number;
  attestation: Attestation;
  canonical_hash: string;
}

/** The private AuditRecord: the proof plus record-only members. One signature covers both. */
export interface AuditRecord extends AuditProof {
  activity: ActivityEvent[];
  /** Evidence objects, index = step - 1 (empty on partial proofs). */
  evidence: Record<string, unknown>[];
  /** Internal ids (account, runner node, ...), never in the view or the AuditProof. */
  internal?: Record<string, unknown>;
  /** One per trail event when the capsule's Capsulefile declared `signing_config`. */
  customer_attestations?: CustomerAttestation[];
}

export type FailureType =
  | 'FormatInvalid'
  | 'VersionUnsupported'
  | 'StepCountInvalid'
  | 'ChainMismatch'
  | 'FinalHashMismatch'
  | 'CanonicalHashMismatch'
  | 'ActivityMismatch'
  | 'KeyInvalid'
  | 'AttestationMissing'
  | 'SignatureMismatch'
  | 'KeyResolution';

export interface FailureReason {
  type: FailureType;
  reason: string;
}

export interface VerifyChecks {
  cdp_version_valid: boolean;
  chain_integrity: boolean;
  final_hash_valid: boolean;
  step_count: number;
  signature_valid: boolean;
  algorithm: string;
  /** Present (false) only for the legacy session form, whose chain is taken as is (chain_integrity false: not checked). */
  chain_recomputed?: boolean;
}

/** What a verified document states about its destruction (absent when it does not say). */
export interface DestructionReport {
  status: 'complete' | 'incomplete';
  incomplete_steps?: IncompleteStep[];
  /** Present (true) when the statement disagrees with the document's component proofs. */
  contradicted?: true;
}

export type VerifyResult =
  | {
      valid: true;
      checks: VerifyChecks;
      completeness?: 'partial';
      /** 'reduced': the legacy session form, whose chain is taken from the document, not recomputed. */
      scope?: 'reduced';
      destruction?: DestructionReport;
      verified_at: string;
    }
  | { valid: false; stage_reached: number; failure_reason: FailureReason; verified_at: string };

/** Trust manifest for the offline CLI (docs/PROOF_FORMAT.md "Managed signing authority"). */
export interface TrustManifest {
  authorities: { signing_authority_id: string; keys: { signing_key_version: number; public_key: string }[] }[];
}
