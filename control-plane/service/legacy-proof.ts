// The older proof form of the session-named variant (SPEC "Older proof form",
// CONTRACT 4 "legacy session form"): cdp_version 1.0, session_id, sha256:
// chain hashes, signature over the ASCII of the final hash hex.
//
// How it is emitted (decision): the real proof of a session is the 2.1
// AuditRecord, stored and served like any capsule's (GET /v1/proofs/:id).
// The DELETE /v1/sessions/:id answer carries, as `cdp`, a 1.0 document derived
// from the same destruction: same destroyed_at, same 8 steps, chain hashes by
// the SPEC chain rule with SHA-256 in place of SHA-512, signed by its own
// fresh ephemeral key (registered for GET /v1/keys/:id, then zeroized).
// Verifiers check it at reduced scope (chain_recomputed false).
//
// Its key id has the CONTRACT section 8 form, named by the instant this 1.0
// document was signed: the destroyed_at name already belongs to the 2.1
// record's key, and key ids are unique in the registry.
import { createHash } from 'node:crypto';
import * as ed from '@noble/ed25519';
import { ephemeralKeyId } from '../../shared/proof/index.js';
import type { KeyRecord, Random } from '../domain/index.js';

const STEPS: [string, string, string][] = [
  ['eee_namespace', 'environment_isolation', 'procfs_verification'],
  ['eee_tmpfs', 'filesystem_isolation', 'mountinfo_verification'],
  ['eee_memory', 'multipass_wipe', 'dod_5220_multipass_wipe'],
  ['dire_keys', 'key_destruction', 'ed25519_key_destruction'],
  ['dire_identity', 'credential_incineration', 'credential_incineration'],
  ['fgx_forensic', 'merkle_zero_state', 'merkle_tree_verification'],
  ['rzl_audit', 'chain_integrity_seal', 'hash_chain_validation'],
  ['capsule_destroy', 'lifecycle_completion', 'capsule_lifecycle_verification'],
];

const sha256 = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');
ed.hashes.sha512 = (m: Uint8Array) => new Uint8Array(createHash('sha512').update(m).digest());

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

export function emitLegacySessionProof(
  sessionId: string,
  destroyedAt: string,
  random: Random,
  nowIso: string,
): { doc: Record<string, unknown>; key: KeyRecord } {
  let prev = sha256('');
  const chain = STEPS.map(([subsystem, operation, method], i) => {
    prev = sha256(`${prev}\0${subsystem}\0destroy\0${method}\0${destroyedAt}`);
    return { step: i + 1, subsystem, operation, chain_hash: `sha256:${prev}` };
  });
  const seed = random(32);
  try {
    const pub = ed.getPublicKey(seed);
    const sig = ed.sign(new TextEncoder().encode(prev), seed);
    const signedAt = legacySignedAt(destroyedAt, nowIso);
    const keyId = ephemeralKeyId(signedAt, sessionId);
    const publicKey = Buffer.from(pub).toString('base64');
    return {
      doc: {
        cdp_version: '1.0',
        session_id: sessionId,
        destroyed_at: destroyedAt,
        chain,
        final_hash: `sha256:${prev}`,
        attestation: {
          algorithm: 'Ed25519',
          public_key: `base64:${publicKey}`,
          key_id: keyId,
          signature: `base64:${Buffer.from(sig).toString('base64')}`,
        },
      },
      key: {
        key_id: keyId,
        algorithm: 'Ed25519',
        public_key: publicKey,
        created_at: signedAt,
        signing_authority_id: 'svc-ephemeral',
        signing_key_version: 1,
      },
    };
  } finally {
    seed.fill(0);
  }
}
