// POST /v1/verify on a parsed body: the offline rules for a proof, the
// reduced-scope path for a presentation projection (SPEC "Proofs and keys").
// Pure, so the same function runs in the request thread and in the verify worker.
import { invalid } from '../../shared/errors.js';
import {
  isPresentation,
  verifyPresentation,
  verifyProof,
  verdictLine,
  type CryptoProvider,
  type PresentationResult,
  type VerifyResult,
} from '../../shared/proof/index.js';
import { parseBody, verifySchema } from '../domain/index.js';

/** A verify result with its one-line human verdict (`summary`), the same line `capsule verify` prints. */
export type HostedResult = (VerifyResult | PresentationResult) & { summary: string };

export function withSummary<R extends VerifyResult | PresentationResult>(r: R): R & { summary: string } {
  return { ...r, summary: verdictLine(r) };
}

export function verifyHostedRequest(body: unknown, now: () => string, crypto?: CryptoProvider): HostedResult {
  const b = parseBody(verifySchema, body);
  if (b.cdp === undefined) throw invalid('cdp', 'is required');
  const opts = { now, ...(crypto ? { crypto } : {}) };
  return withSummary(isPresentation(b.cdp) ? verifyPresentation(b.cdp, opts) : verifyProof(b.cdp, opts));
}
