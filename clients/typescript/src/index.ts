// capsule-sdk: the TypeScript client of the Capsule API.
export {
  CapsuleClient,
  type ClientOptions,
  type CallOptions,
  type Timeouts,
  type Page,
  type RawResponse,
} from './client.js';
export * from './errors.js';
export * from './conventions.js';
export { verifyProof, verdictLine, type VerifyResult, type TrustManifest } from './verify.js';
export type * from './types.gen.js';
