// Emitting the AuditRecord: the 8-step chain over the runner's evidence, the
// activity root, canonical_hash and one Ed25519 signature. An ephemeral
// private key is zeroized right after that one signature (also on failure).
import type {
  ActivityEvent,
  AuditRecord,
  CapsuleContext,
  ChainStep,
  CustomerAttestation,
  RegulatoryContext,
  Termination,
} from './types.js';
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { chainHashes, STEP_COUNT, STEPS } from './chain.js';
import { canonicalHashOfJcs, canonicalViewJcs } from './canonical.js';
import { canonicalize } from './jcs.js';
import { activityRootOfCanonical } from './merkle.js';
import { bytesEqual, toBase64 } from './encoding.js';
import { ephemeralKeyId, partialKeyId, type SigningKeyMaterial } from './keys.js';
import { withDestruction } from './destruction.js';

export const EMITTED_CDP_VERSION = '2.1';

export interface RecordInput {
  capsule_id: string;
  created_at: string;
  destroyed_at: string;
  /** Evidence objects for steps 1..8, index = step - 1. */
  evidence: Record<string, unknown>[];
  activity: ActivityEvent[];
  /** The root over the whole trail when the caller folded it itself (read in pages); `activity` is then what the record carries. */
  activity_root?: string;
  /** false: the record carries no `activity` member (a trail too long to inline, bound by the root alone). */
  activity_carried?: boolean;
  capsule_context?: CapsuleContext;
  termination?: Termination;
  regulatory_context?: RegulatoryContext;
  internal?: Record<
    string,
    unknown
  >; /** Record-only: the customer's co-signatures, one per trail event (docs/PROOF_FORMAT.md). */
  customer_attestations?: CustomerAttestation[];
}

export interface PartialRecordInput {
  capsule_id: string;
  created_at: string;
  reason: string;
  /** What was measured after the loss (e.g. the runner's recovery wipe); record-only like a full record's evidence. */
  evidence?: Record<string, unknown>[];
  activity: ActivityEvent[];
  /** The root over the whole trail when the caller folded it itself (read in pages); `activity` is then what the record carries. */
  activity_root?: string;
  /** false: the record carries no `activity` member (a trail too long to inline, bound by the root alone). */
  activity_carried?: boolean;
  capsule_context?: CapsuleContext;
  termination?: Termination;
  internal?: Record<
    string,
    unknown
  >; /** Record-only: the customer's co-signatures, one per trail event (docs/PROOF_FORMAT.md). */
  customer_attestations?: CustomerAttestation[];
}

/**
 * The component_proofs rule: a step among 1..6 is listed when its evidence
 * object says `performed: true`, i.e. the step ran its operation and measured
 * the result (namespace inodes read, mount table read, bytes overwritten, ...).
 * Evidence without it (skipped, not applicable, could not be measured) is not
 * listed. The value is that step's evidence hash, re-computable from the
 * record's `evidence` member.
 */
export function performedVerifiableOperation(evidence: Record<string, unknown>): boolean {
  return evidence['performed'] === true;
}

function evidenceHash(h: Hasher, evidence: Record<string, unknown>): string {
  return 'sha512:' + h.sha512Utf8Hex(canonicalize(evidence));
}

function activityRootOf(h: Hasher, activity: ActivityEvent[]): string {
  return activityRootOfCanonical(
    h,
    activity.map((e) => canonicalize(e)),
  );
}

/** Signs the view's canonical hash, fills the attestation, zeroizes an ephemeral key. */
function seal(h: Hasher, doc: Record<string, unknown>, key: SigningKeyMaterial, keyId: string): string {
  const ephemeral = key.mode === 'ephemeral';
  const privateKey = ephemeral ? key.key.privateKey : key.privateKey;
  const publicKey = ephemeral ? key.key.publicKey : key.publicKey;
  try {
    if (privateKey.length !== 32 || privateKey.every((b) => b === 0)) {
      throw new RangeError('signing key: private key missing or already zeroized');
    }
    if (!bytesEqual(h.ed25519PublicKey(privateKey), publicKey)) {
      throw new RangeError('signing key: public key does not belong to the private key');
    }
    doc['attestation'] = { algorithm: 'Ed25519', public_key: 'base64:' + toBase64(publicKey), key_id: keyId };
    const canonical = canonicalHashOfJcs(h, canonicalViewJcs(doc));
    const message = new TextEncoder().encode(canonical.slice('sha512:'.length));
    const signature = h.ed25519Sign(message, privateKey);
    (doc['attestation'] as Record<string, string>)['signature'] = 'base64:' + toBase64(signature);
    return canonical;
  } finally {
    if (ephemeral) privateKey.fill(0);
  }
}

function managedMembers(key: SigningKeyMaterial): Record<string, unknown> {
  return key.mode === 'managed'
    ? { signing_authority_id: key.signing_authority_id, signing_key_version: key.signing_key_version }
    : {};
}

/** Runs an emission; an ephemeral private key is zeroized however it ends. */
function zeroizingOnExit<T>(key: SigningKeyMaterial, f: () => T): T {
  try {
    return f();
  } finally {
    if (key.mode === 'ephemeral') key.key.privateKey.fill(0);
  }
}

/**
 * The signed AuditRecord. Input must be JSON data (a JcsError otherwise); it is
 * copied first, so later changes to the caller's objects cannot alter a signed record.
 * `crypto` does the hashes and the signature (default @noble); every provider
 * gives the same bytes, since Ed25519 signatures are deterministic.
 */
export function emitRecord(input: RecordInput, key: SigningKeyMaterial, crypto?: CryptoProvider): AuditRecord {
  return zeroizingOnExit(key, () => buildRecord(structuredClone(input), key, hasher(crypto)));
}

/** The signed partial AuditRecord; as emitRecord. */
export function emitPartialRecord(
  input: PartialRecordInput,
  key: SigningKeyMaterial,
  crypto?: CryptoProvider,
): AuditRecord {
  return zeroizingOnExit(key, () => buildPartialRecord(structuredClone(input), key, hasher(crypto)));
}

function buildRecord(input: RecordInput, key: SigningKeyMaterial, h: Hasher): AuditRecord {
  if (!Array.isArray(input.evidence) || input.evidence.length !== STEP_COUNT) {
    throw new RangeError(`emitRecord: evidence must hold ${STEP_COUNT} objects (index = step - 1)`);
  }
  const hashes = chainHashes(h, input.destroyed_at);
  const evidenceHashes = input.evidence.map((e) => evidenceHash(h, e));
  const chain: ChainStep[] = STEPS.map((def, i) => ({
    step: def.step,
    subsystem: def.subsystem,
    operation: def.operation,
    evidence_hash: evidenceHashes[i]!,
    chain_hash: 'sha512:' + hashes[i]!,
  }));
  const componentProofs: Record<string, string> = {};
  STEPS.forEach((def, i) => {
    if (def.component !== undefined && performedVerifiableOperation(input.evidence[i]!)) {
      componentProofs[def.component] = evidenceHashes[i]!;
    }
  });
  const keyId = key.mode === 'managed' ? key.key_id : ephemeralKeyId(input.destroyed_at, input.capsule_id);
  const doc: Record<string, unknown> = {
    cdp_version: EMITTED_CDP_VERSION,
    capsule_id: input.capsule_id,
    created_at: input.created_at,
    destroyed_at: input.destroyed_at,
    chain,
    final_hash: chain[STEP_COUNT - 1]!.chain_hash,
    capsule_context: input.capsule_context,
    // The signed statement of whether every step fully happened (docs/PROOF_FORMAT.md "Destruction status").
    termination: input.termination && withDestruction(input.termination, input.evidence),
    regulatory_context: input.regulatory_context,
    component_proofs: componentProofs,
    activity_root: input.activity_root ?? activityRootOf(h, input.activity),
    ...managedMembers(key),
  };
  return finishRecord(h, doc, key, keyId, input, input.evidence);
}

function buildPartialRecord(input: PartialRecordInput, key: SigningKeyMaterial, h: Hasher): AuditRecord {
  const keyId = key.mode === 'managed' ? key.key_id : partialKeyId(input.capsule_id);
  const doc: Record<string, unknown> = {
    cdp_version: EMITTED_CDP_VERSION,
    capsule_id: input.capsule_id,
    created_at: input.created_at,
    completeness: 'partial',
    reason: input.reason,
    chain: [],
    capsule_context: input.capsule_context,
    termination: input.termination,
    activity_root: input.activity_root ?? activityRootOf(h, input.activity),
    ...managedMembers(key),
  };
  return finishRecord(h, doc, key, keyId, input, input.evidence ?? []);
}

/** Signs the view of `doc`, then adds the record-only members (never signed directly: bound through activity_root). */
function finishRecord(
  h: Hasher,
  doc: Record<string, unknown>,
  key: SigningKeyMaterial,
  keyId: string,
  input: {
    activity: ActivityEvent[];
    activity_carried?: boolean;
    internal?: Record<string, unknown>;
    customer_attestations?: CustomerAttestation[];
  },
  evidence: Record<string, unknown>[],
): AuditRecord {
  dropUndefined(doc);
  doc['canonical_hash'] = seal(h, doc, key, keyId);
  if (input.activity_carried !== false) doc['activity'] = input.activity;
  doc['evidence'] = evidence;
  if (input.internal !== undefined) doc['internal'] = input.internal;
  if (input.customer_attestations !== undefined) doc['customer_attestations'] = input.customer_attestations;
  return doc as unknown as AuditRecord;
}

function dropUndefined(doc: Record<string, unknown>): void {
  for (const k of Object.keys(doc)) if (doc[k] === undefined) delete doc[k];
}
