// The DELETE /v1/sessions/:id answer's 1.0 document: emitted by the proof
// library (shared/proof/legacy.ts, docs/PROOF_FORMAT.md "Older forms") with a
// fresh ephemeral key from the injected randomness; here only its key record.
import {
  emitLegacySessionProof as emitLegacy,
  generateEphemeralKey,
  legacySignedAt,
} from '../../shared/proof/index.js';
import type { KeyRecord, Random } from '../domain/index.js';
import { EPHEMERAL_AUTHORITY } from './destruction.js';

export { legacySignedAt };

export function emitLegacySessionProof(
  sessionId: string,
  destroyedAt: string,
  random: Random,
  nowIso: string,
): { doc: Record<string, unknown>; key: KeyRecord } {
  // The library zeroizes the private key after its one signature (also on failure).
  const p = emitLegacy(sessionId, destroyedAt, generateEphemeralKey(random), nowIso);
  return {
    doc: p.doc,
    key: {
      key_id: p.key_id,
      algorithm: 'Ed25519',
      public_key: p.public_key,
      created_at: p.signed_at,
      signing_authority_id: EPHEMERAL_AUTHORITY,
      signing_key_version: 1,
    },
  };
}
