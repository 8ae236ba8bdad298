// The one-line verdict every verifier prints or returns (CLI, POST /v1/verify,
// the stored-proof read). `valid: true` is worded "AuditProof verified", never
// "destruction verified" (docs/PROOF_FORMAT.md "What a valid proof proves").
import type { VerifyResult } from './types.js';
import type { PresentationResult } from './presentation.js';
import { STAGE_NAMES } from './verify.js';

/** Each reason is cut to this many characters in the line (the document keeps it whole). */
const REASON_CHARS = 300;

function shortReason(reason: string): string {
  const chars = Array.from(reason.replace(/\s+/g, ' '));
  return chars.length <= REASON_CHARS ? chars.join('') : chars.slice(0, REASON_CHARS - 1).join('') + '…';
}

/**
 * "AuditProof verified", qualified where the check was reduced or the
 * document is partial, then "; destruction reported incomplete (step 3:
 * <reason>; step 6: <reason>)" when the signed statement (read against the
 * component proofs) says so. A failure names its stage and enum pair.
 */
export function verdictSummary(r: VerifyResult | PresentationResult): string {
  if (!r.valid) {
    const stage = STAGE_NAMES[r.stage_reached] ?? 'unknown';
    return `AuditProof NOT verified: stage ${r.stage_reached} (${stage}) failed: ${r.failure_reason.type}/${r.failure_reason.reason}`;
  }
  let line = 'AuditProof verified';
  if ('scope' in r && r.scope === 'reduced') {
    line += ' at reduced scope (presentation projection: document_hash taken as stated, not recomputed)';
  } else if ('chain_recomputed' in r.checks && r.checks.chain_recomputed === false) {
    line += ' at reduced scope (legacy session form: chain hashes taken from the document, not recomputed)';
  }
  if (r.completeness === 'partial') line += ' (partial proof: integrity of the document only)';
  if (r.destruction === 'incomplete' && r.incomplete_steps !== undefined) {
    const steps = r.incomplete_steps.map((s) => `step ${s.step}: ${shortReason(s.reason)}`).join('; ');
    line += `; destruction reported incomplete (${steps})`;
    if (r.destruction_contradicted) line += '; its destruction statement disagrees with its component proofs';
  }
  return line;
}
