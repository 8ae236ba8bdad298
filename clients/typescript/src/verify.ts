// Offline verification with the service's own proof library (shared/proof):
// the same stages and failure names as POST /v1/verify, no network.
import { verifyProof as verify } from '../../../shared/proof/index.js';
import type { TrustManifest, VerifyResult } from '../../../shared/proof/index.js';
import { verdictLine } from '../../../shared/verdict.js';

export type { TrustManifest, VerifyResult };
export { verdictLine };

/** Verifies a proof document offline; never throws. */
export function verifyProof(document: unknown, trustManifest?: TrustManifest): VerifyResult {
  return verify(document, trustManifest ? { manifest: trustManifest } : {});
}
