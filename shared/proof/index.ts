// Public surface of the proof library. Emitting (control plane) and verifying
// (CLI, API, browsers) both go through here. The verifier path imports no
// Node-only module; Node callers may pass a faster CryptoProvider
// (shared/node/crypto-node.ts).
export type * from './types.js';

export type { CryptoProvider } from './crypto.js';
export { nobleCrypto } from './crypto.js';
export type { EphemeralKey, SigningKeyMaterial } from './keys.js';
export { generateEphemeralKey, ephemeralKeyId, partialKeyId } from './keys.js';
export type { RecordInput, PartialRecordInput } from './emit.js';
export { emitRecord, emitPartialRecord, performedVerifiableOperation, EMITTED_CDP_VERSION } from './emit.js';
export { toAuditProof, toPresentation, RECORD_ONLY_MEMBERS, type PresentationOptions } from './project.js';
export {
  verifyPresentation,
  isPresentation,
  type PresentationChecks,
  type PresentationResult,
} from './presentation.js';
export type { VerifyOptions } from './verify.js';
export { verdictLine, incompleteSteps, withDestruction } from './destruction.js';
export {
  eventHash,
  checkCustomerAttestations,
  customerAttestationLine,
  CUSTOMER_ALGORITHMS,
  type CustomerAlgorithm,
  type CustomerVerify,
  type CustomerAttestationReport,
} from './customer-attestation.js';
/** Never throws: every input gets a result. */
export { verifyProof, systemNow, STAGE_NAMES } from './verify.js';
export { canonicalize, tryCanonicalize, JcsError } from './jcs.js';
export { merkleRoot, merkleLeafHash, MerkleAccumulator, activityRoot } from './merkle.js';
export { canonicalView, canonicalHash, VIEW_MEMBERS } from './canonical.js';
export { STEPS, GENESIS_HEX, computeChain, type StepDefinition } from './chain.js';
export {
  emitLegacySessionProof,
  legacySignedAt,
  legacyChainHashes,
  LEGACY_GENESIS_HEX,
  type LegacySessionProof,
} from './legacy.js';
export { toHex, fromHex, toBase64, fromBase64 } from './encoding.js';
export {
  signWebhook,
  verifyWebhookSignature,
  WEBHOOK_SIGNATURE_HEADER,
  WEBHOOK_TOLERANCE_SECONDS,
  type WebhookCheck,
} from '../webhook-signature.js';
