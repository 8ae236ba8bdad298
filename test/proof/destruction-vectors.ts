// The project's destruction-statement vectors (test/data/cdp-vectors/destruction/),
// built deterministically from the emitter with a fixed test key. The vectors
// test checks the files equal this output and verify to their `expect`;
// `node dist/test/proof/destruction-vectors.js --write` rewrites them.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import {
  canonicalHash,
  emitRecord,
  generateEphemeralKey,
  toAuditProof,
  toBase64,
  type AuditRecord,
} from '../../shared/proof/index.js';
import { ed25519Sign } from '../../shared/proof/crypto.js';
import { recordInput, seededRandom } from './fixtures.js';

const DIR = fileURLToPath(new URL('../../../test/data/cdp-vectors/destruction/', import.meta.url));
const SEED = 0x5eed_d35c;
const VERIFIED_CHECKS = {
  cdp_version_valid: true,
  chain_integrity: true,
  final_hash_valid: true,
  step_count: 8,
  signature_valid: true,
  algorithm: 'Ed25519',
};

const WIPE_REASON =
  '2 files under directories nested past PATH_MAX were not read or overwritten (ENAMETOOLONG), 12582912 bytes in all';
const MERKLE_REASON = 'the zero state was not read back for 12582912 bytes the wipe did not overwrite';

/** Record input whose every step 1..6 performed its operation. */
function completeInput(): ReturnType<typeof recordInput> {
  const input = recordInput();
  input.evidence[4] = { performed: true, processes_scanned: 412, live_processes_with_uid_after: 0 };
  return input;
}

function emit(mutate: (ev: Record<string, unknown>[]) => void): AuditRecord {
  const input = completeInput();
  mutate(input.evidence);
  return emitRecord(input, { mode: 'ephemeral', key: generateEphemeralKey(seededRandom(SEED)) });
}

/** Re-signs a document with the vectors' key after a change (what a lying signer could do). */
function resign(doc: Record<string, unknown>): Record<string, unknown> {
  const key = generateEphemeralKey(seededRandom(SEED));
  const att = doc['attestation'] as Record<string, string>;
  delete att['signature'];
  const hash = canonicalHash(doc);
  doc['canonical_hash'] = hash;
  att['signature'] = 'base64:' + toBase64(ed25519Sign(new TextEncoder().encode(hash.slice(7)), key.privateKey));
  key.privateKey.fill(0);
  return doc;
}

export interface DestructionVector {
  file: string;
  description: string;
  document: unknown;
  expect: Record<string, unknown>;
}

export function destructionVectors(): DestructionVector[] {
  const complete = emit(() => {});
  const one = emit((ev) => {
    ev[2] = { ...ev[2], performed: false, reason: WIPE_REASON };
  });
  const two = emit((ev) => {
    ev[2] = { ...ev[2], performed: false, reason: WIPE_REASON };
    ev[5] = { ...ev[5], performed: false, reason: MERKLE_REASON };
  });
  const oneProof = toAuditProof(one) as unknown as Record<string, any>;

  // Flipped after signing, canonical_hash recomputed so the signature is what fails.
  const flipped = structuredClone(oneProof);
  flipped['termination'].destruction = 'complete';
  delete flipped['termination'].incomplete_steps;
  flipped['canonical_hash'] = canonicalHash(flipped);

  // A signer that states "complete" although step 3 has no component proof.
  const lying = structuredClone(oneProof);
  lying['termination'].destruction = 'complete';
  delete lying['termination'].incomplete_steps;
  resign(lying);

  const badValue = structuredClone(oneProof);
  badValue['termination'].destruction = 'mostly';
  resign(badValue);

  const missingSteps = structuredClone(oneProof);
  delete missingSteps['termination'].incomplete_steps;
  resign(missingSteps);

  return [
    {
      file: 'valid-destruction-complete.json',
      description: 'AuditRecord whose steps 1-6 all performed: termination.destruction "complete"',
      document: complete,
      expect: { valid: true, checks: VERIFIED_CHECKS, destruction: 'complete' },
    },
    {
      file: 'valid-destruction-incomplete-one-step.json',
      description: 'AuditRecord whose step 3 evidence says performed: false with a reason: incomplete, step 3',
      document: one,
      expect: {
        valid: true,
        checks: VERIFIED_CHECKS,
        destruction: 'incomplete',
        incomplete_steps: [{ step: 3, reason: WIPE_REASON }],
      },
    },
    {
      file: 'valid-destruction-incomplete-two-steps.json',
      description: 'AuditProof whose steps 3 and 6 did not fully happen: both listed, in order',
      document: toAuditProof(two),
      expect: {
        valid: true,
        checks: VERIFIED_CHECKS,
        destruction: 'incomplete',
        incomplete_steps: [
          { step: 3, reason: WIPE_REASON },
          { step: 6, reason: MERKLE_REASON },
        ],
      },
    },
    {
      file: 'invalid-destruction-flipped.json',
      description:
        'incomplete AuditProof with destruction flipped to "complete" and incomplete_steps removed after signing, canonical_hash recomputed: the signature fails',
      document: flipped,
      expect: {
        valid: false,
        stage_reached: 5,
        failure_reason: { type: 'SignatureMismatch', reason: 'DoesNotVerify' },
      },
    },
    {
      file: 'valid-destruction-contradicted.json',
      description:
        'signed "complete" while step 3 has no component proof: verified, read as incomplete and flagged as contradicted',
      document: lying,
      expect: {
        valid: true,
        checks: VERIFIED_CHECKS,
        destruction: 'incomplete',
        incomplete_steps: [{ step: 3, reason: 'no component proof: the step recorded no verifiable operation' }],
        destruction_contradicted: true,
      },
    },
    {
      file: 'invalid-destruction-unknown-value.json',
      description: 'signed termination.destruction outside "complete" | "incomplete"',
      document: badValue,
      expect: { valid: false, stage_reached: 0, failure_reason: { type: 'FormatInvalid', reason: 'WrongType' } },
    },
    {
      file: 'invalid-destruction-steps-missing.json',
      description: 'signed "incomplete" without incomplete_steps',
      document: missingSteps,
      expect: { valid: false, stage_reached: 0, failure_reason: { type: 'FormatInvalid', reason: 'MissingField' } },
    },
  ];
}

export function vectorFileText(v: DestructionVector): string {
  return JSON.stringify({ description: v.description, document: v.document, expect: v.expect }, null, 2) + '\n';
}

if (process.argv.includes('--write')) {
  for (const v of destructionVectors()) writeFileSync(DIR + v.file, vectorFileText(v));
}
