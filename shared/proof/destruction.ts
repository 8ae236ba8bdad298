// Whether destruction fully happened, stated inside the signed `termination`
// member (docs/PROOF_FORMAT.md "Destruction status"), and the one-line
// verdict every verifier prints. The view's member list is frozen, so the
// statement rides in a member the view already signs.
import type { DestructionReport, IncompleteStep, Termination, VerifyResult } from './types.js';
import type { PresentationResult } from './presentation.js';
import { STEPS } from './chain.js';

/** Longest reason kept per step: the statement is for a human reader, not a log. */
export const MAX_REASON_CHARS = 500;

function reasonOf(step: number, evidence: Record<string, unknown>): string {
  const r = evidence['reason'];
  const method = typeof evidence['method'] === 'string' ? ` (${evidence['method']})` : '';
  const text = typeof r === 'string' && r.trim() !== '' ? r : `step ${step} not performed${method}`;
  return text.length > MAX_REASON_CHARS ? text.slice(0, MAX_REASON_CHARS - 1) + '…' : text;
}

/**
 * The rule: a step whose evidence says `performed: false` did not fully
 * happen; its `reason` (or a generic one) is stated. Evidence that does not
 * say `performed` at all (steps that record facts, not an operation) counts
 * as nothing either way.
 */
export function incompleteSteps(evidence: readonly Record<string, unknown>[]): IncompleteStep[] {
  const out: IncompleteStep[] = [];
  evidence.forEach((e, i) => {
    if (e !== null && typeof e === 'object' && e['performed'] === false) {
      out.push({ step: i + 1, reason: reasonOf(i + 1, e) });
    }
  });
  return out;
}

/** `termination` with the destruction statement derived from the step evidence. */
export function withDestruction(t: Termination, evidence: readonly Record<string, unknown>[]): Termination {
  const steps = incompleteSteps(evidence);
  const { destruction: _d, incomplete_steps: _s, ...rest } = t;
  return steps.length === 0
    ? { ...rest, destruction: 'complete' }
    : { ...rest, destruction: 'incomplete', incomplete_steps: steps };
}

/**
 * Stage 0 shape check of a document's statement. Undefined when absent
 * (documents older than the statement), 'bad' when malformed.
 */
export function parseDestruction(termination: unknown): Termination['destruction'] | 'bad' | undefined {
  if (termination === undefined) return undefined;
  if (termination === null || typeof termination !== 'object' || Array.isArray(termination)) return undefined;
  const t = termination as Record<string, unknown>;
  const d = t['destruction'];
  const steps = t['incomplete_steps'];
  if (d === undefined) return steps === undefined ? undefined : 'bad';
  if (d === 'complete') return steps === undefined ? 'complete' : 'bad';
  if (d !== 'incomplete' || !Array.isArray(steps) || steps.length === 0) return 'bad';
  for (const s of steps as unknown[]) {
    if (s === null || typeof s !== 'object' || Array.isArray(s)) return 'bad';
    const { step, reason } = s as Record<string, unknown>;
    if (typeof step !== 'number' || !Number.isInteger(step) || step < 1 || step > 8) return 'bad';
    if (typeof reason !== 'string') return 'bad';
  }
  return 'incomplete';
}

/** The statement as a verify result reports it; undefined when absent, 'bad' when malformed. */
export function readDestruction(termination: unknown): DestructionReport | 'bad' | undefined {
  const status = parseDestruction(termination);
  if (status === 'bad' || status === undefined) return status;
  if (status === 'complete') return { status };
  const steps = (termination as { incomplete_steps: IncompleteStep[] }).incomplete_steps;
  return { status, incomplete_steps: steps.map((s) => ({ step: s.step, reason: s.reason })) };
}

/** Reason reported for a step among 1..6 that has no component proof and is not listed. */
export const NO_COMPONENT_PROOF = 'no component proof: the step recorded no verifiable operation';

/**
 * A signed statement read against the component proofs of an 8-step
 * document (docs/PROOF_FORMAT.md "Destruction status", contradictions): a
 * verifier never reports more destruction than the document shows, so every
 * step among 1..6 without a component proof is reported incomplete, and any
 * disagreement (such a step not listed, or a listed step that has its
 * component proof) is flagged `contradicted`.
 */
export function againstComponentProofs(
  report: DestructionReport,
  componentKeys: ReadonlySet<string> | undefined,
): DestructionReport {
  const byStep = new Map((report.incomplete_steps ?? []).map((s) => [s.step, s.reason] as const));
  let contradicted = false;
  for (const def of STEPS) {
    if (def.component === undefined) continue;
    const proven = componentKeys?.has(def.component) === true;
    if (!proven && !byStep.has(def.step)) {
      byStep.set(def.step, NO_COMPONENT_PROOF);
      contradicted = true;
    } else if (proven && byStep.has(def.step)) {
      contradicted = true;
    }
  }
  if (!contradicted) return report;
  const steps = [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([step, reason]) => ({ step, reason }));
  return { status: 'incomplete', incomplete_steps: steps, contradicted: true };
}

/** The human verdict: "AuditProof verified", never "destruction verified". */
export function verdictLine(r: VerifyResult | PresentationResult): string {
  if (!r.valid) {
    return `AuditProof NOT verified: stage ${r.stage_reached} failed: ${r.failure_reason.type}/${r.failure_reason.reason}`;
  }
  const parts = ['AuditProof verified'];
  if ('scope' in r && r.scope === 'reduced') parts[0] += ' at reduced scope';
  if (r.completeness === 'partial') parts.push('partial proof: integrity of the document only');
  const d = 'destruction' in r ? r.destruction : undefined;
  if (d?.status === 'incomplete') {
    const steps = (d.incomplete_steps ?? []).map((s) => `step ${s.step}: ${s.reason}`).join('; ');
    parts.push(`destruction reported incomplete (${steps})`);
    if (d.contradicted) parts.push('its destruction statement disagrees with its component proofs');
  }
  if ('checks' in r && 'chain_recomputed' in r.checks && r.checks.chain_recomputed === false) {
    parts.push('legacy session form: chain hashes taken from the document, not recomputed');
  }
  return parts.join('; ');
}
