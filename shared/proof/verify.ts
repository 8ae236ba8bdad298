// The verifier: the stages of docs/PROOF_FORMAT.md "Verification stages", in order, with the closed failure
// enum. `stage_reached` is the stage that failed.
//   0 parse and version   1 step count   2 chain   3 final hash
//   4 canonical hash and activity root   5 signature
//   6 key resolution (only when a trust manifest is given)
// verifyProof never throws: every input gets a result.
import type { FailureReason, FailureType, TrustManifest, VerifyChecks, VerifyResult } from './types.js';
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { chainStepHexAt, GENESIS_HEX, STEP_COUNT, STEPS } from './chain.js';
import { canonicalHashHexOfJcs } from './canonical.js';
import { activityRootHexOfCanonical } from './merkle.js';
import { fromBase64, bytesEqual } from './encoding.js';
import { parseProof, type ParsedProof } from './format.js';
import { againstComponentProofs } from './destruction.js';

export interface VerifyOptions {
  manifest?: TrustManifest;
  crypto?: CryptoProvider;
  /** Injected clock for verified_at (RFC 3339, six fraction digits). */
  now?: () => string;
}

export const STAGE_NAMES = [
  'parse and version',
  'step count',
  'chain',
  'final hash',
  'canonical hash and activity root',
  'signature',
  'key resolution',
] as const;

const ED25519_PUBLIC_KEY_BYTES = 32;
const ED25519_SIGNATURE_BYTES = 64;

let lastSecond = -1;
let secondPrefix = '';
// '000000Z' .. '999000Z': the millisecond part and the fixed tail of a stamp.
const MS_TAILS = Array.from({ length: 1000 }, (_, ms) => String(ms).padStart(3, '0') + '000Z');

/** RFC 3339 UTC with six fraction digits, e.g. 2026-11-21T22:05:00.123000Z (millisecond clock). */
export function systemNow(): string {
  const ms = Date.now();
  const second = Math.floor(ms / 1000);
  if (second !== lastSecond) {
    // Date formatting costs about as much as the rest of stage 0's scalar
    // checks, so the `YYYY-MM-DDTHH:MM:SS.` prefix is formatted once per second.
    lastSecond = second;
    const iso = new Date(second * 1000).toISOString(); // ...SS.000Z
    secondPrefix = iso.slice(0, iso.length - 4);
  }
  return secondPrefix + MS_TAILS[ms - second * 1000]!;
}

interface Failed {
  stage: number;
  type: FailureType;
  reason: string;
}

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
        prev = chainStepHexAt(h, prev, i, destroyedAt);
        // Format checked at stage 0 (`sha512:` + 128 hex), so the hex part decides.
        if (hexPart(p.steps[i]!.chainHash) !== prev) return failed(2, 'ChainMismatch', 'ChainHashMismatch');
      }
    }
    // Legacy form: hashes are taken from the document (chain_recomputed: false).

    // Stage 3: final_hash equals step 8.
    if (p.finalHash !== p.steps[n - 1]!.chainHash) return failed(3, 'FinalHashMismatch', 'DoesNotMatchStep8');
  }

  // Stage 4 (2.x): canonical hash, then the activity root when the trail is carried.
  if (p.viewJcs !== undefined) {
    // Hashes are compared by their hex part: stage 0 checked the `sha512:` + 128 hex format.
    if (p.canonicalHash !== undefined && hexPart(p.canonicalHash) !== canonicalHashHexOfJcs(h, p.viewJcs)) {
      return failed(4, 'CanonicalHashMismatch', 'DoesNotMatch');
    }
    if (p.activityJcs !== undefined) {
      // A trail with no signed root to bind it cannot be accepted as part of the proof.
      if (p.activityRoot === undefined || hexPart(p.activityRoot) !== activityRootHexOfCanonical(h, p.activityJcs)) {
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
  const message = asciiBytes(basis.slice(basis.indexOf(':') + 1), MESSAGE_SCRATCH);
  if (!h.ed25519Verify(signature, message, publicKey)) return failed(5, 'SignatureMismatch', 'DoesNotVerify');

  // Stage 6: trust-manifest key resolution for managed-authority proofs.
  if (manifest !== undefined && p.signingAuthorityId !== undefined) {
    return resolveKey(manifest, p.signingAuthorityId, p.signingKeyVersion!, publicKey);
  }
  return undefined;
}

function resolveKey(
  manifest: TrustManifest,
  authorityId: string,
  version: number,
  publicKey: Uint8Array,
): Failed | undefined {
  const authorities = Array.isArray(manifest.authorities) ? manifest.authorities : [];
  const authority = authorities.find(
    (a) => a !== null && typeof a === 'object' && a.signing_authority_id === authorityId,
  );
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

// The signed message (128 ASCII hex digits, 64 for a 1.0 SHA-256 basis) is
// written into one reused buffer: a fresh Uint8Array over 64 bytes lives off
// the V8 heap and costs several times the copy.
// WARNING: a CryptoProvider must not keep its arguments after returning.
const MESSAGE_SCRATCH = new Uint8Array(128);

function asciiBytes(text: string, scratch: Uint8Array): Uint8Array {
  const out = text.length <= scratch.length ? scratch.subarray(0, text.length) : new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

/**
 * The hex part of a `sha512:` hash that stage 0 has format-checked. Equality
 * on the (sliced, not copied) part is several times cheaper than endsWith.
 */
function hexPart(prefixed: string): string {
  return prefixed.slice(7);
}

function checksFor(p: ParsedProof): VerifyChecks {
  const complete = p.steps.length === STEP_COUNT;
  const checks: VerifyChecks = {
    cdp_version_valid: true,
    // The legacy form's chain is taken from the document: its integrity was not checked.
    chain_integrity: complete && p.form !== 'legacy',
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
    return {
      valid: true,
      checks: checksFor(p),
      ...(p.partial ? { completeness: 'partial' as const } : {}),
      ...(p.form === 'legacy' ? { scope: 'reduced' as const } : {}),
      // Read after the signature, against the component proofs (a statement changed after signing failed above).
      ...(p.destruction !== undefined
        ? {
            destruction:
              p.steps.length === STEP_COUNT && p.version !== '1.0'
                ? againstComponentProofs(p.destruction, p.componentKeys)
                : p.destruction,
          }
        : {}),
      verified_at: verifiedAt,
    };
  } catch {
    // Only a faulty CryptoProvider or manifest can get here: stages 1-6 never
    // touch the caller's document. Report it as the stage it interrupted.
    return stage === 0
      ? failure(0, { type: 'FormatInvalid', reason: 'WrongType' }, verifiedAt)
      : failure(5, { type: 'SignatureMismatch', reason: 'DoesNotVerify' }, verifiedAt);
  }
}
