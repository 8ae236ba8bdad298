// The signed destruction statement carried in `termination` (docs/PROOF_FORMAT.md
// "Destruction statement"): the emitter derives it from the step evidence, the
// verifiers read it back against the component proofs.
import type { DestructionVerdict, IncompleteStep } from './types.js';
import { STEPS } from './chain.js';
import type { DestructionStatement } from './format.js';

/** Reason recorded for a step among 1..6 with no component proof and no reason of its own. */
export const NO_COMPONENT_PROOF = 'no component proof: the step recorded no verifiable operation';
/** Reason recorded for a step whose evidence says `performed: false` without a reason. */
export const PERFORMED_FALSE = 'the step evidence says performed: false';
/** A reason is cut to this many characters (code points) in the signed statement. */
export const MAX_REASON_CHARS = 500;

function boundedReason(text: string): string {
  const chars = Array.from(text.trim());
  return chars.length <= MAX_REASON_CHARS ? chars.join('') : chars.slice(0, MAX_REASON_CHARS - 1).join('') + '…';
}

/**
 * The statement for 8 evidence objects (index = step - 1): a step did not
 * fully happen when its evidence says `performed: false`, or when it is one
 * of steps 1..6 and does not say `performed: true` (so it gets no component
 * proof). Its reason is the evidence's `reason` string when it has one.
 */
export function destructionFromEvidence(evidence: readonly unknown[]): {
  destruction: 'complete' | 'incomplete';
  incomplete_steps?: IncompleteStep[];
} {
  const steps: IncompleteStep[] = [];
  STEPS.forEach((def, i) => {
    const e = evidence[i];
    const o = e !== null && typeof e === 'object' ? (e as Record<string, unknown>) : {};
    const performed = o['performed'];
    if (performed !== false && (def.component === undefined || performed === true)) return;
    const own = o['reason'];
    const reason =
      typeof own === 'string' && own.trim() !== ''
        ? boundedReason(own)
        : performed === false
          ? PERFORMED_FALSE
          : NO_COMPONENT_PROOF;
    steps.push({ step: def.step, reason });
  });
  return steps.length === 0 ? { destruction: 'complete' } : { destruction: 'incomplete', incomplete_steps: steps };
}

/**
 * How a verifier reports a signed statement: the steps it lists, plus every
 * step among 1..6 that has no component proof on an 8-step document (a
 * verifier never reports more than the document shows). Any disagreement
 * between the statement and the component proofs is flagged.
 */
export function readDestruction(
  statement: DestructionStatement | undefined,
  componentKeys: ReadonlySet<string> | undefined,
  fullChain: boolean,
): DestructionVerdict {
  if (statement === undefined) return {};
  const byStep = new Map(statement.steps.map((s) => [s.step, s.reason] as const));
  let contradicted = false;
  if (fullChain) {
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
  }
  if (byStep.size === 0) return { destruction: 'complete' };
  const steps = [...byStep.entries()].sort((a, b) => a[0] - b[0]).map(([step, reason]) => ({ step, reason }));
  return {
    destruction: 'incomplete',
    incomplete_steps: steps,
    ...(contradicted ? { destruction_contradicted: true as const } : {}),
  };
}
