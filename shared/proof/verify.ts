// The verifier: CONTRACT section 7 stages, in order, with the closed failure
// enum. `stage_reached` is the stage that failed.
//   0 parse and version   1 step count   2 chain   3 final hash
//   4 canonical hash and activity root   5 signature
//   6 key resolution (only when a trust manifest is given)
// verifyProof never throws: every input gets a result.
import type { FailureReason, FailureType, TrustManifest, VerifyChecks, VerifyResult } from './types.js';
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { chainStepHex, GENESIS_HEX, STEP_COUNT, STEPS } from './chain.js';
import { canonicalHashOfJcs } from './canonical.js';
import { activityRootOfCanonical } from './merkle.js';
import { fromBase64, bytesEqual } from './encoding.js';
import { parseProof, type ParsedProof } from './format.js';

export interface VerifyOptions {
  manifest?: TrustManifest;
  crypto?: CryptoProvider;
  /** Injected clock for verified_at (RFC 3339, six fraction digits). */
  now?: () => string;
}

export const STAGE_NAMES = [
  'parse and version', 'step count', 'chain', 'final hash',
  'canonical hash and activity root', 'signature', 'key resolution',
] as const;

const ED25519_PUBLIC_KEY_BYTES = 32;
const ED25519_SIGNATURE_BYTES = 64;

let lastMs = -1;
let lastStamp = '';

/** RFC 3339 UTC with six fraction digits, e.g. 2026-11-21T22:05:00.123000Z (millisecond clock). */
export function systemNow(): string {
  const ms = Date.now();
  if (ms !== lastMs) {
    lastMs = ms;
    lastStamp = new Date(ms).toISOString().slice(0, -1) + '000Z'; // formatted once per millisecond
  }
  return lastStamp;
}

interface Failed { stage: number; type: FailureType; reason: string }

const failed = (stage: number, type: FailureType, reason: string): Failed => ({ stage, type, reason });

/** Stages 1-6 on a parsed proof; undefined when every stage passed. */
function runStages(p: ParsedProof, h: Hasher, manifest: TrustManifest | undefined): Failed | undefined {
  // Stage 1: exactly 8 steps, or an empty chain on a partial proof.
  const n = p.steps.length;
  if (!(n === STEP_COUNT || (n === 0 && p.partial))) return failed(1, 'StepCountInvalid', 'NotEightSteps');

  if (n === STEP_COUNT) {
    // Stage 2: structure first (order, then subsystems), then the hashes.
    for (let i = 0; i < n; i++) if (p.steps[i]!.step !== i + 1) return failed(2, 'ChainMismatch', 'StepOrder');
    for (let i = 0; i < n; i++) {
      if (p.steps[i]!.subsystem !== STEPS[i]!.subsystem) return failed(2, 'ChainMismatch', 'SubsystemMismatch');
    }
    if (p.form === 'capsule') {
      // Recompute every chain hash from the fixed step table and destroyed_at.
      let prev = GENESIS_HEX;
      const destroyedAt = p.destroyedAt!;
      for (let i = 0; i < n; i++) {
        prev = chainStepHex(h, prev, STEPS[i]!, destroyedAt);
        // Format checked at stage 0 (`sha512:` + 128 hex), so the hex part decides.
        if (!p.steps[i]!.chainHash.endsWith(prev)) return failed(2, 'ChainMismatch', 'ChainHashMismatch');
      }
    }
    // Legacy form: hashes are taken from the document (chain_recomputed: false).

    // Stage 3: final_hash equals step 8.
    if (p.finalHash !== p.steps[n - 1]!.chainHash) return failed(3, 'FinalHashMismatch', 'DoesNotMatchStep8');
  }

  // Stage 4 (2.x): canonical hash, then the activity root when the trail is carried.
  if (p.viewJcs !== undefined) {
    if (p.canonicalHash !== undefined && canonicalHashOfJcs(h, p.viewJcs) !== p.canonicalHash) {
      return failed(4, 'CanonicalHashMismatch', 'DoesNotMatch');
    }
    if (p.activityJcs !== undefined) {
      // A trail with no signed root to bind it cannot be accepted as part of the proof.
      if (p.activityRoot === undefined || activityRootOfCanonical(h, p.activityJcs) !== p.activityRoot) {
        return failed(4, 'ActivityMismatch', 'RootMismatch');
      }
    }
  }

  // Stage 5: signature over the ASCII hex of the basis (no prefix).
  const att = p.attestation;
  if (att === undefined) return failed(5, 'AttestationMissing', 'Unsigned');
  if (att.algorithm !== 'Ed25519') return failed(5, 'KeyInvalid', 'UnsupportedAlgorithm');
  const publicKey = decodePrefixedBase64(att.publicKey);
  if (publicKey === undefined || publicKey.length !== ED25519_PUBLIC_KEY_BYTES) {
    return failed(5, 'KeyInvalid', 'MalformedPublicKey');
  }
  const signature = decodePrefixedBase64(att.signature);
  if (signature === undefined || signature.length !== ED25519_SIGNATURE_BYTES) {
    return failed(5, 'SignatureMismatch', 'MalformedSignature');
  }
  const basis = p.version === '1.0' ? p.finalHash! : p.canonicalHash!;
  const message = asciiBytes(basis.slice(basis.indexOf(':') + 1));
  if (!h.ed25519Verify(signature, message, publicKey)) return failed(5, 'SignatureMismatch', 'DoesNotVerify');

  // Stage 6: trust-manifest key resolution for managed-authority proofs.
  if (manifest !== undefined && p.signingAuthorityId !== undefined) {
    return resolveKey(manifest, p.signingAuthorityId, p.signingKeyVersion!, publicKey);
  }
  return undefined;
}

function resolveKey(manifest: TrustManifest, authorityId: string, version: number, publicKey: Uint8Array): Failed | undefined {
  const authorities = Array.isArray(manifest.authorities) ? manifest.authorities : [];
  const authority = authorities.find((a) => a !== null && typeof a === 'object' && a.signing_authority_id === authorityId);
  if (authority === undefined) return failed(6, 'KeyResolution', 'UnknownAuthority');
  const keys = Array.isArray(authority.keys) ? authority.keys : [];
  const entry = keys.find((k) => k !== null && typeof k === 'object' && k.signing_key_version === version);
  if (entry === undefined) return failed(6, 'KeyResolution', 'UnknownKeyVersion');
  const listed = typeof entry.public_key === 'string' ? decodeManifestKey(entry.public_key) : undefined;
  if (listed === undefined || !bytesEqual(listed, publicKey)) return failed(6, 'KeyResolution', 'KeyMismatch');
  return undefined;
}

/** The manifest lists raw base64 (as the key record endpoint does); a `base64:` prefix is tolerated. */
function decodeManifestKey(text: string): Uint8Array | undefined {
  return fromBase64(text.startsWith('base64:') ? text.slice(7) : text);
}

function decodePrefixedBase64(text: string): Uint8Array | undefined {
  return text.startsWith('base64:') ? fromBase64(text.slice(7)) : undefined;
}

function asciiBytes(text: string): Uint8Array {
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

function checksFor(p: ParsedProof): VerifyChecks {
  const complete = p.steps.length === STEP_COUNT;
  const checks: VerifyChecks = {
    cdp_version_valid: true,
    chain_integrity: complete,
    final_hash_valid: complete,
    step_count: p.steps.length,
    signature_valid: true,
    algorithm: 'Ed25519',
  };
  if (p.form === 'legacy') checks.chain_recomputed = false;
  return checks;
}

function clock(opts: VerifyOptions | undefined): string {
  try {
    const t = opts?.now?.();
    return typeof t === 'string' ? t : systemNow();
  } catch {
    return systemNow();
  }
}

function failure(stage: number, reason: FailureReason, verifiedAt: string): VerifyResult {
  return { valid: false, stage_reached: stage, failure_reason: reason, verified_at: verifiedAt };
}

/** Never throws: every input gets a result. */
export function verifyProof(doc: unknown, opts?: VerifyOptions): VerifyResult {
  const verifiedAt = clock(opts);
  let stage = 0;
  try {
    const parsed = parseProof(doc);
    if (!parsed.ok) return failure(0, parsed.failure, verifiedAt);
    stage = 1;
    const p = parsed.proof;
    const f = runStages(p, hasher(opts?.crypto), opts?.manifest);
    if (f !== undefined) return failure(f.stage, { type: f.type, reason: f.reason }, verifiedAt);
    const result: VerifyResult = { valid: true, checks: checksFor(p), verified_at: verifiedAt };
    if (p.partial) {
      return { valid: true, checks: result.checks, completeness: 'partial', verified_at: verifiedAt };
    }
    return result;
  } catch {
    // Only a faulty CryptoProvider or manifest can get here: stages 1-6 never
    // touch the caller's document. Report it as the stage it interrupted.
    return stage === 0
      ? failure(0, { type: 'FormatInvalid', reason: 'WrongType' }, verifiedAt)
      : failure(5, { type: 'SignatureMismatch', reason: 'DoesNotVerify' }, verifiedAt);
  }
}
