// Signing keys: ephemeral Ed25519 keypairs (fresh per proof, randomness
// injected) and the key_id naming rule of docs/PROOF_FORMAT.md "Managed signing authority".
import { hasher, type CryptoProvider } from './crypto.js';

export interface EphemeralKey {
  publicKey: Uint8Array;
  /** Zeroized by emitRecord/emitPartialRecord after the one signature. */
  privateKey: Uint8Array;
}

export type SigningKeyMaterial =
  | { mode: 'ephemeral'; key: EphemeralKey }
  | {
      mode: 'managed';
      signing_authority_id: string;
      signing_key_version: number;
      key_id: string;
      publicKey: Uint8Array;
      privateKey: Uint8Array; // not zeroized: the authority keeps it
    };

/** A fresh keypair from 32 bytes of the injected randomness (an RFC 8032 seed). */
export function generateEphemeralKey(random: (n: number) => Uint8Array, crypto?: CryptoProvider): EphemeralKey {
  const seed = random(32);
  if (!(seed instanceof Uint8Array) || seed.length !== 32) {
    throw new RangeError('generateEphemeralKey: the randomness source must return 32 bytes');
  }
  const privateKey = Uint8Array.from(seed);
  seed.fill(0);
  return { publicKey: hasher(crypto).ed25519PublicKey(privateKey), privateKey };
}

const SERVICE_TIMESTAMP = /^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})\.(\d{6})Z$/;

/** `svc-verify-<destroyed_at as YYYYMMDDTHHMMSSffffffZ>-<capsule_id cut to 12>`. */
export function ephemeralKeyId(destroyedAt: string, capsuleId: string): string {
  const m = SERVICE_TIMESTAMP.exec(destroyedAt);
  if (!m) throw new RangeError('ephemeralKeyId: destroyed_at must be RFC 3339 UTC with six fraction digits');
  return `svc-verify-${m[1]}${m[2]}${m[3]}T${m[4]}${m[5]}${m[6]}${m[7]}Z-${capsuleId.slice(0, 12)}`;
}

/** Partial proofs have no destroyed_at: `svc-verify-partial-<capsule_id cut to 12>` (as the vectors name it). */
export function partialKeyId(capsuleId: string): string {
  return `svc-verify-partial-${capsuleId.slice(0, 12)}`;
}
