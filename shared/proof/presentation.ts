// The hosted verify endpoint's reduced-scope check of the presentation
// projection (`?format=presentation`, SPEC "Proofs and keys"). The projection
// carries no per-step chain and no canonical view, so `canonical_hash` (its
// `document_hash`) cannot be recomputed: what is checked is the summary's own
// consistency and that the embedded attestation signs `document_hash`.
// Offline verifiers (verifyProof, the CLI) keep rejecting this form by design.
//
//   0 parse and version   1 step count   3 final hash (from destroyed_at)   5 signature
//
// Never throws: every input gets a result.
import type { DestructionReport, FailureReason, FailureType } from './types.js';
import { readDestruction } from './destruction.js';
import { hasher, type CryptoProvider } from './crypto.js';
import { chainHashes, STEP_COUNT } from './chain.js';
import { fromBase64 } from './encoding.js';
import { isPlainObject } from './format.js';
import { systemNow } from './verify.js';

export interface PresentationChecks {
  cdp_version_valid: boolean;
  /** destruction.final_hash equals the chain rule over destruction.destroyed_at (complete proofs). */
  final_hash_valid: boolean;
  step_count: number;
  signature_valid: boolean;
  algorithm: string;
  /** Always false: without the canonical view, document_hash is taken as the document states it. */
  document_hash_recomputed: false;
}

export type PresentationResult =
  | {
      valid: true;
      scope: 'reduced';
      checks: PresentationChecks;
      completeness?: 'partial';
      /** As the projection states it: at this scope it is not bound to the signature. */
      destruction?: DestructionReport;
      verified_at: string;
    }
  | { valid: false; scope: 'reduced'; stage_reached: number; failure_reason: FailureReason; verified_at: string };

export interface PresentationOptions {
  crypto?: CryptoProvider;
  now?: () => string;
}

/** The projection's marker: summaries in place of the chain (the same test stage 0 of verifyProof applies). */
export function isPresentation(doc: unknown): boolean {
  return (
    isPlainObject(doc) &&
    doc['chain'] === undefined &&
    (doc['destruction'] !== undefined || doc['document_hash'] !== undefined || doc['verify'] !== undefined)
  );
}

const SHA512 = /^sha512:[0-9a-f]{128}$/;
const VERSIONS = ['2.0', '2.1'];

class Failed {
  constructor(
    readonly stage: number,
    readonly type: FailureType,
    readonly reason: string,
  ) {}
}

function member(o: Record<string, unknown>, k: string, type: 'string' | 'number' | 'object'): unknown {
  const v = o[k];
  if (v === undefined) throw new Failed(0, 'FormatInvalid', 'MissingField');
  if (type === 'object' ? !isPlainObject(v) : typeof v !== type) throw new Failed(0, 'FormatInvalid', 'WrongType');
  return v;
}

const str = (o: Record<string, unknown>, k: string): string => member(o, k, 'string') as string;

function hash(o: Record<string, unknown>, k: string): string {
  const v = str(o, k);
  if (!SHA512.test(v)) throw new Failed(0, 'FormatInvalid', 'BadHashFormat');
  return v;
}

function prefixedBase64(text: string): Uint8Array | undefined {
  return text.startsWith('base64:') ? fromBase64(text.slice(7)) : undefined;
}

interface Checked {
  checks: PresentationChecks;
  partial: boolean;
  destruction: DestructionReport | undefined;
}

function check(doc: unknown, crypto: CryptoProvider | undefined): Checked {
  if (!isPresentation(doc)) throw new Failed(0, 'FormatInvalid', 'NotAnObject');
  const d = doc as Record<string, unknown>;
  const version = str(d, 'cdp_version');
  if (!VERSIONS.includes(version)) throw new Failed(0, 'VersionUnsupported', 'UnknownVersion');
  str(d, 'capsule_id');
  str(d, 'created_at');
  const destruction = member(d, 'destruction', 'object') as Record<string, unknown>;
  const steps = member(destruction, 'steps', 'number') as number;
  if (!Number.isInteger(steps)) throw new Failed(0, 'FormatInvalid', 'WrongType');
  const completeness = str(destruction, 'completeness');
  if (completeness !== 'complete' && completeness !== 'partial') throw new Failed(0, 'FormatInvalid', 'WrongType');
  const documentHash = hash(d, 'document_hash');
  const att = member(d, 'attestation', 'object') as Record<string, unknown>;
  const algorithm = str(att, 'algorithm');
  const publicKeyText = str(att, 'public_key');
  const signatureText = str(att, 'signature');

  const partial = completeness === 'partial';
  const stated = readDestruction(d['termination']);
  if (stated === 'bad') throw new Failed(0, 'FormatInvalid', 'WrongType');
  if (!(steps === STEP_COUNT || (partial && steps === 0))) throw new Failed(1, 'StepCountInvalid', 'NotEightSteps');
  const h = hasher(crypto);
  if (steps === STEP_COUNT) {
    // The chain hashes depend on destroyed_at alone, so step 8 is recomputable without the steps.
    const destroyedAt = str(destruction, 'destroyed_at');
    const finalHash = hash(destruction, 'final_hash');
    if (finalHash.slice(7) !== chainHashes(h, destroyedAt)[STEP_COUNT - 1])
      throw new Failed(3, 'FinalHashMismatch', 'DoesNotMatchStep8');
  }
  if (algorithm !== 'Ed25519') throw new Failed(5, 'KeyInvalid', 'UnsupportedAlgorithm');
  const publicKey = prefixedBase64(publicKeyText);
  if (publicKey === undefined || publicKey.length !== 32) throw new Failed(5, 'KeyInvalid', 'MalformedPublicKey');
  const signature = prefixedBase64(signatureText);
  if (signature === undefined || signature.length !== 64)
    throw new Failed(5, 'SignatureMismatch', 'MalformedSignature');
  // 2.x signature basis: the ASCII hex of canonical_hash, which the projection names document_hash.
  if (!h.ed25519Verify(signature, new TextEncoder().encode(documentHash.slice(7)), publicKey))
    throw new Failed(5, 'SignatureMismatch', 'DoesNotVerify');
  return {
    partial,
    destruction: stated,
    checks: {
      cdp_version_valid: true,
      final_hash_valid: steps === STEP_COUNT,
      step_count: steps,
      signature_valid: true,
      algorithm: 'Ed25519',
      document_hash_recomputed: false,
    },
  };
}

/** Reduced-scope verification of a presentation projection. Never throws. */
export function verifyPresentation(doc: unknown, opts: PresentationOptions = {}): PresentationResult {
  let verifiedAt: string;
  try {
    verifiedAt = opts.now?.() ?? systemNow();
  } catch {
    verifiedAt = systemNow();
  }
  try {
    const { checks, partial, destruction } = check(doc, opts.crypto);
    return {
      valid: true,
      scope: 'reduced',
      checks,
      ...(partial ? { completeness: 'partial' as const } : {}),
      ...(destruction !== undefined ? { destruction } : {}),
      verified_at: verifiedAt,
    };
  } catch (e) {
    const f = e instanceof Failed ? e : new Failed(0, 'FormatInvalid', 'WrongType');
    return {
      valid: false,
      scope: 'reduced',
      stage_reached: f.stage,
      failure_reason: { type: f.type, reason: f.reason },
      verified_at: verifiedAt,
    };
  }
}
