// Offline verification with the service's own proof library (shared/proof):
// the same stages, failure names and summary line as POST /v1/verify, no network.
import { verdictLine as line, verifyProof as verify } from '../../../shared/proof/index.js';
import type { TrustManifest, VerifyResult } from '../../../shared/proof/index.js';

export type { TrustManifest, VerifyResult };

/** Verifies a proof document offline; never throws. */
export function verifyProof(document: unknown, trustManifest?: TrustManifest): VerifyResult {
  return verify(document, trustManifest ? { manifest: trustManifest } : {});
}

/**
 * The one-line verdict: "AuditProof verified" (never "destruction verified"),
 * with reduced scope, partial proofs and a destruction the signed document
 * reports as incomplete stated. The result carries all it needs; the document
 * argument is accepted for symmetry with the Python SDK and not read.
 */
export function verdictLine(result: VerifyResult, _document?: unknown): string {
  return line(result);
}
