// Public surface of the proof library. Emitting (control plane) and verifying
// (CLI, API, browsers) both go through here. The verifier path imports no
// Node-only module; Node callers may pass a faster CryptoProvider.
//
// STUB: signatures fixed so that callers can be written; bodies land with the
// proof-core work.
import type {
  ActivityEvent, AuditProof, AuditRecord, CapsuleContext, RegulatoryContext,
  Termination, TrustManifest, VerifyResult,
} from './types.js';

export type * from './types.js';

/** Hash and signature primitives; default is @noble (isomorphic). */
export interface CryptoProvider {
  sha512(data: Uint8Array): Uint8Array;
  ed25519Verify(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
}

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

export interface RecordInput {
  capsule_id: string;
  created_at: string;
  destroyed_at: string;
  /** Evidence objects for steps 1..8, index = step - 1. */
  evidence: Record<string, unknown>[];
  activity: ActivityEvent[];
  capsule_context?: CapsuleContext;
  termination?: Termination;
  regulatory_context?: RegulatoryContext;
  internal?: Record<string, unknown>;
}

export interface PartialRecordInput {
  capsule_id: string;
  created_at: string;
  reason: string;
  activity: ActivityEvent[];
  capsule_context?: CapsuleContext;
  termination?: Termination;
  internal?: Record<string, unknown>;
}

export interface VerifyOptions {
  manifest?: TrustManifest;
  crypto?: CryptoProvider;
  /** Injected clock for verified_at (RFC 3339, six fraction digits). */
  now?: () => string;
}

const todo = (): never => { throw new Error('proof library: not implemented yet'); };

export function generateEphemeralKey(_random: (n: number) => Uint8Array): EphemeralKey { return todo(); }
export function ephemeralKeyId(_destroyedAt: string, _capsuleId: string): string { return todo(); }
export function emitRecord(_input: RecordInput, _key: SigningKeyMaterial): AuditRecord { return todo(); }
export function emitPartialRecord(_input: PartialRecordInput, _key: SigningKeyMaterial): AuditRecord { return todo(); }
export function toAuditProof(_record: AuditRecord): AuditProof { return todo(); }
/** Presentation projection (`?format=presentation`); offline verifiers reject it by design. */
export function toPresentation(_record: AuditRecord): Record<string, unknown> { return todo(); }
/** Never throws: every input gets a result. */
export function verifyProof(_doc: unknown, _opts?: VerifyOptions): VerifyResult { return todo(); }
