// The destruction-status vectors (docs/PROOF_FORMAT.md "Destruction status"):
// built by the emitter from fixed inputs and a seeded key, committed under
// test/data/destruction-vectors/, and checked by destruction.test.ts, which
// also rebuilds them to prove the committed files are what the code emits.
// `node dist/test/proof/destruction-vectors.js --write` refreshes the files.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  canonicalHash,
  emitRecord,
  generateEphemeralKey,
  toAuditProof,
  type AuditRecord,
} from '../../shared/proof/index.js';
import { recordInput, seededRandom } from './fixtures.js';

export const DESTRUCTION_VECTOR_DIR = fileURLToPath(
  new URL('../../../test/data/destruction-vectors/', import.meta.url),
);

export interface DestructionVector {
  description: string;
  document: Record<string, unknown>;
  /** The verify result without verified_at, and the summary line a verifier prints. */
  expect: Record<string, unknown>;
  summary: string;
}

const ALL_PERFORMED = (): Record<string, unknown>[] => {
  const e = recordInput().evidence.map((x) => ({ ...x }));
  e[4] = { method: 'credential_incineration', performed: true, processes_scanned: 12 };
  return e;
};

function emit(evidence: Record<string, unknown>[], seed: number): AuditRecord {
  const key = generateEphemeralKey(seededRandom(seed));
  return emitRecord({ ...recordInput(), evidence }, { mode: 'ephemeral', key });
}

const CHECKS = {
  cdp_version_valid: true,
  chain_integrity: true,
  final_hash_valid: true,
  step_count: 8,
  signature_valid: true,
  algorithm: 'Ed25519',
};

const WIPE_REASON = '2 entries not overwritten: ENAMETOOLONG (directory nested past PATH_MAX)';
const ZERO_REASON = 'zero-state read-back not taken: wipe incomplete';

export function buildDestructionVectors(): Record<string, DestructionVector> {
  const complete = toAuditProof(emit(ALL_PERFORMED(), 11));

  const one = ALL_PERFORMED();
  one[2] = { ...one[2], performed: false, reason: WIPE_REASON };
  const incompleteOne = toAuditProof(emit(one, 12));

  const two = ALL_PERFORMED();
  two[2] = { ...two[2], performed: false, reason: WIPE_REASON };
  two[5] = { method: 'merkle_tree_verification', performed: false, reason: ZERO_REASON };
  const incompleteTwo = emit(two, 13); // the AuditRecord, evidence and trail included

  // A holder flips the statement to "complete": the canonical hash no longer matches...
  const flipped = structuredClone(incompleteOne) as unknown as Record<string, unknown>;
  const t = flipped['termination'] as Record<string, unknown>;
  t['destruction'] = 'complete';
  delete t['incomplete_steps'];
  // ...and recomputing it leaves a signature over the old hash.
  const flippedRehashed = structuredClone(flipped);
  flippedRehashed['canonical_hash'] = canonicalHash(flippedRehashed);

  const malformed = structuredClone(incompleteOne) as unknown as Record<string, unknown>;
  (malformed['termination'] as Record<string, unknown>)['incomplete_steps'] = [];

  return {
    'valid-complete.json': {
      description: 'every step performed: termination.destruction "complete"',
      document: complete as unknown as Record<string, unknown>,
      expect: { valid: true, checks: CHECKS, destruction: { status: 'complete' } },
      summary: 'AuditProof verified',
    },
    'valid-incomplete-one-step.json': {
      description: 'step 3 (wipe) evidence performed:false: stated in the signed termination member',
      document: incompleteOne as unknown as Record<string, unknown>,
      expect: {
        valid: true,
        checks: CHECKS,
        destruction: { status: 'incomplete', incomplete_steps: [{ step: 3, reason: WIPE_REASON }] },
      },
      summary: `AuditProof verified; destruction reported incomplete (step 3: ${WIPE_REASON})`,
    },
    'valid-incomplete-two-steps-record.json': {
      description: 'AuditRecord (evidence and trail) with steps 3 and 6 not performed',
      document: incompleteTwo as unknown as Record<string, unknown>,
      expect: {
        valid: true,
        checks: CHECKS,
        destruction: {
          status: 'incomplete',
          incomplete_steps: [
            { step: 3, reason: WIPE_REASON },
            { step: 6, reason: ZERO_REASON },
          ],
        },
      },
      summary: `AuditProof verified; destruction reported incomplete (step 3: ${WIPE_REASON}; step 6: ${ZERO_REASON})`,
    },
    'invalid-flipped-to-complete.json': {
      description: 'an incomplete proof whose statement was flipped to "complete": canonical hash mismatch',
      document: flipped,
      expect: {
        valid: false,
        stage_reached: 4,
        failure_reason: { type: 'CanonicalHashMismatch', reason: 'DoesNotMatch' },
      },
      summary: 'AuditProof NOT verified: stage 4 failed: CanonicalHashMismatch/DoesNotMatch',
    },
    'invalid-flipped-and-rehashed.json': {
      description: 'flipped to "complete" with canonical_hash recomputed: the signature no longer verifies',
      document: flippedRehashed,
      expect: {
        valid: false,
        stage_reached: 5,
        failure_reason: { type: 'SignatureMismatch', reason: 'DoesNotVerify' },
      },
      summary: 'AuditProof NOT verified: stage 5 failed: SignatureMismatch/DoesNotVerify',
    },
    'invalid-incomplete-without-steps.json': {
      description: '"incomplete" with an empty incomplete_steps list: malformed statement',
      document: malformed,
      expect: { valid: false, stage_reached: 0, failure_reason: { type: 'FormatInvalid', reason: 'WrongType' } },
      summary: 'AuditProof NOT verified: stage 0 failed: FormatInvalid/WrongType',
    },
  };
}

if (process.argv.includes('--write')) {
  for (const [name, v] of Object.entries(buildDestructionVectors())) {
    writeFileSync(DESTRUCTION_VECTOR_DIR + name, JSON.stringify(v, null, 2) + '\n');
  }
}
