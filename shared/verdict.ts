// The one-line verdict shown to people (SDKs, CLI summaries, the browser
// verifier page) for a verification result and the document it is about.
// Wording follows docs/PROOF_FORMAT.md: "AuditProof verified", never
// "destruction verified"; what the signed document itself reports as not
// fully done is repeated, not hidden.
import type { VerifyResult } from './proof/types.js';
import { STAGE_NAMES } from './proof/verify.js';

interface IncompleteStep {
  step?: unknown;
  reason?: unknown;
}

/** Steps the signed termination member reports as incomplete ("step 3: reason"). */
export function incompleteSteps(doc: unknown): string[] | null {
  if (doc === null || typeof doc !== 'object') return null;
  const term = (doc as Record<string, unknown>)['termination'];
  if (term === null || typeof term !== 'object') return null;
  const t = term as Record<string, unknown>;
  if (t['destruction'] !== 'incomplete') return null;
  const steps = Array.isArray(t['incomplete_steps']) ? (t['incomplete_steps'] as IncompleteStep[]) : [];
  return steps.map((s) => `step ${String(s?.step ?? '?')}: ${String(s?.reason ?? 'no reason given')}`);
}

/** The verdict line for `result` (from verifyProof or the online endpoint) on `doc`. */
export function verdictLine(result: VerifyResult, doc?: unknown): string {
  if (!result.valid) {
    const stage = STAGE_NAMES[result.stage_reached] ?? 'unknown stage';
    return `AuditProof NOT verified: stage ${result.stage_reached} (${stage}) failed: ${result.failure_reason.type}/${result.failure_reason.reason}`;
  }
  const notes: string[] = [];
  if (result.completeness === 'partial') {
    const reason = doc && typeof doc === 'object' ? (doc as Record<string, unknown>)['reason'] : undefined;
    notes.push(
      `partial proof: integrity of the document only${typeof reason === 'string' ? `; reason: ${reason}` : ''}`,
    );
  }
  if (result.checks.chain_recomputed === false || (!result.checks.chain_integrity && result.completeness !== 'partial'))
    notes.push(
      'reduced scope: legacy session form, chain hashes taken from the document, linkage and signature checked',
    );
  let line = notes.length ? `AuditProof verified (${notes.join('; ')})` : 'AuditProof verified';
  const incomplete = incompleteSteps(doc);
  if (incomplete !== null)
    line += `; destruction reported incomplete (${incomplete.length ? incomplete.join('; ') : 'no steps named'})`;
  return line;
}
