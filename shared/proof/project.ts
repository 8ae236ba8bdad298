// Projections of the private AuditRecord: the shareable AuditProof (same
// signature, record-only members dropped) and the presentation summary of
// `?format=presentation`, which offline verifiers reject by design.
import type { AuditProof, AuditRecord } from './types.js';

/** Members only the AuditRecord carries; never in the view, never shared. */
export const RECORD_ONLY_MEMBERS = ['activity', 'evidence', 'internal', 'customer_attestations'] as const;

export function toAuditProof(record: AuditRecord): AuditProof {
  const proof: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(record)) {
    if (!(RECORD_ONLY_MEMBERS as readonly string[]).includes(k)) proof[k] = v;
  }
  return proof as unknown as AuditProof;
}

export interface PresentationOptions {
  /** Where the hosted verifier lives ({verify_url}); omitted when not configured. */
  verifyUrl?: string;
}

/**
 * Presentation projection: no per-step chain and no activity trail; summaries
 * named `destruction`, `document_hash` and `verify`, plus the same attestation.
 */
export function toPresentation(record: AuditRecord, opts: PresentationOptions = {}): Record<string, unknown> {
  const destruction: Record<string, unknown> = {
    steps: record.chain.length,
    completeness: record.completeness ?? 'complete',
  };
  if (record.destroyed_at !== undefined) destruction['destroyed_at'] = record.destroyed_at;
  if (record.final_hash !== undefined) destruction['final_hash'] = record.final_hash;
  if (record.reason !== undefined) destruction['reason'] = record.reason;
  if (record.component_proofs !== undefined) destruction['component_proofs'] = Object.keys(record.component_proofs);
  const verify: Record<string, unknown> = {
    // Only the hosted endpoint's reduced-scope path accepts this form.
    endpoint: 'POST /v1/verify',
    signature_basis: 'canonical_hash',
    activity_events: Array.isArray(record.activity) ? record.activity.length : 0,
  };
  if (record.activity_root !== undefined) verify['activity_root'] = record.activity_root;
  if (opts.verifyUrl !== undefined) verify['url'] = opts.verifyUrl;
  const out: Record<string, unknown> = {
    cdp_version: record.cdp_version,
    capsule_id: record.capsule_id,
    created_at: record.created_at,
  };
  if (record.capsule_context !== undefined) out['capsule_context'] = record.capsule_context;
  if (record.termination !== undefined) out['termination'] = record.termination;
  if (record.regulatory_context !== undefined) out['regulatory_context'] = record.regulatory_context;
  if (record.signing_authority_id !== undefined) {
    out['signing_authority_id'] = record.signing_authority_id;
    out['signing_key_version'] = record.signing_key_version;
  }
  out['destruction'] = destruction;
  out['document_hash'] = record.canonical_hash;
  out['verify'] = verify;
  out['attestation'] = record.attestation;
  return out;
}
