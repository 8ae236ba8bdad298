// The older proof form of the session-named variant (docs/PROOF_FORMAT.md
// "Older forms", legacy session form): cdp_version 1.0, session_id, sha256:
// chain hashes, signature over the ASCII of the final hash hex.
//
// How it is emitted: the real proof of a session is the 2.1 AuditRecord,
// stored and served like any capsule's. The DELETE /v1/sessions/:id answer
// carries, as `cdp`, a 1.0 document derived from the same destruction: same
// destroyed_at, the same 8 steps (the step table of chain.ts), chain hashes by
// the chain rule with SHA-256 in place of SHA-512, signed by its own fresh
// ephemeral key, zeroized here after its one signature. Verifiers check it at
// reduced scope (chain not recomputed, chain_integrity false).
//
// Its key id has the ephemeral form, named by the instant this 1.0 document
// was signed: the destroyed_at name already belongs to the 2.1 record's key,
// and key ids are unique in the registry.
import { ed25519PublicKey, ed25519Sign, sha256Utf8Hex } from './crypto.js';
import { STEPS } from './chain.js';
import { bytesEqual, toBase64 } from './encoding.js';
import { ephemeralKeyId, type EphemeralKey } from './keys.js';

/** hex SHA-256 of the empty string: `prev` for step 1 of the legacy chain. */
export const LEGACY_GENESIS_HEX = sha256Utf8Hex('');

/** The 8 legacy chain hashes, hex without prefix. */
export function legacyChainHashes(destroyedAt: string): string[] {
  let prev = LEGACY_GENESIS_HEX;
  return STEPS.map((def) => {
    prev = sha256Utf8Hex(`${prev}\0${def.subsystem}\0destroy\0${def.method}\0${destroyedAt}`);
    return prev;
  });
}

/** `t` (six fraction digits) plus one microsecond. */
function nextMicrosecond(t: string): string {
  const total = Date.parse(`${t.slice(0, 23)}Z`) * 1000 + Number(t.slice(23, 26)) + 1;
  const ms = Math.floor(total / 1000);
  return `${new Date(ms).toISOString().slice(0, -1)}${String(total - ms * 1000).padStart(3, '0')}Z`;
}

/** The 1.0 document's signing instant: now, and strictly after destroyed_at (a frozen test clock may equal it). */
export function legacySignedAt(destroyedAt: string, nowIso: string): string {
  return nowIso > destroyedAt ? nowIso : nextMicrosecond(destroyedAt);
}

export interface LegacySessionProof {
  doc: Record<string, unknown>;
  key_id: string;
  /** Raw base64 (the key record form, no prefix). */
  public_key: string;
  /** The signing instant (the key record's created_at). */
  signed_at: string;
}

/** The signed 1.0 session document. The key's private half is zeroized however this ends. */
export function emitLegacySessionProof(
  sessionId: string,
  destroyedAt: string,
  key: EphemeralKey,
  nowIso: string,
): LegacySessionProof {
  try {
    if (key.privateKey.length !== 32 || key.privateKey.every((b) => b === 0)) {
      throw new RangeError('signing key: private key missing or already zeroized');
    }
    if (!bytesEqual(ed25519PublicKey(key.privateKey), key.publicKey)) {
      throw new RangeError('signing key: public key does not belong to the private key');
    }
    const hashes = legacyChainHashes(destroyedAt);
    const chain = STEPS.map((def, i) => ({
      step: def.step,
      subsystem: def.subsystem,
      operation: def.operation,
      chain_hash: `sha256:${hashes[i]!}`,
    }));
    const finalHex = hashes[hashes.length - 1]!;
    const signature = ed25519Sign(new TextEncoder().encode(finalHex), key.privateKey);
    const signedAt = legacySignedAt(destroyedAt, nowIso);
    const keyId = ephemeralKeyId(signedAt, sessionId);
    const publicKey = toBase64(key.publicKey);
    return {
      doc: {
        cdp_version: '1.0',
        session_id: sessionId,
        destroyed_at: destroyedAt,
        chain,
        final_hash: `sha256:${finalHex}`,
        attestation: {
          algorithm: 'Ed25519',
          public_key: `base64:${publicKey}`,
          key_id: keyId,
          signature: `base64:${toBase64(signature)}`,
        },
      },
      key_id: keyId,
      public_key: publicKey,
      signed_at: signedAt,
    };
  } finally {
    key.privateKey.fill(0);
  }
}
