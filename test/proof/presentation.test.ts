// The hosted endpoint's reduced-scope check of the presentation projection:
// what it accepts, what each tampering gives, and that offline verification
// still refuses the form (SPEC: it verifies only through the hosted path).
import t from 'tap';
import { randomBytes } from 'node:crypto';
import {
  emitPartialRecord,
  emitRecord,
  generateEphemeralKey,
  isPresentation,
  toAuditProof,
  toPresentation,
  verifyPresentation,
  verifyProof,
  type SigningKeyMaterial,
} from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { FAILURE_ENUM } from './helpers.js';
import { partialInput, recordInput } from './fixtures.js';

const key = (): SigningKeyMaterial => ({
  mode: 'ephemeral',
  key: generateEphemeralKey((n) => new Uint8Array(randomBytes(n))),
});
const presentation = (): any => JSON.parse(JSON.stringify(toPresentation(emitRecord(recordInput(), key()))));
const now = () => '2026-11-21T22:10:00.000000Z';

t.test('a presentation verifies at reduced scope, with both providers', async (t) => {
  const p = presentation();
  t.ok(isPresentation(p));
  for (const crypto of [undefined, nodeCrypto]) {
    const r = verifyPresentation(p, { now, ...(crypto ? { crypto } : {}) });
    t.same(r, {
      valid: true,
      scope: 'reduced',
      checks: {
        cdp_version_valid: true,
        final_hash_valid: true,
        step_count: 8,
        signature_valid: true,
        algorithm: 'Ed25519',
        document_hash_recomputed: false,
      },
      destruction: { status: 'incomplete', incomplete_steps: [{ step: 5, reason: 'step 5 not performed' }] },
      verified_at: now(),
    });
  }
  t.match(verifyProof(p), { valid: false, failure_reason: { type: 'FormatInvalid', reason: 'PresentationForm' } });
});

t.test('a partial proof presentation verifies as partial', async (t) => {
  const p = JSON.parse(JSON.stringify(toPresentation(emitPartialRecord(partialInput(), key()))));
  const r = verifyPresentation(p, { now });
  t.match(r, {
    valid: true,
    scope: 'reduced',
    completeness: 'partial',
    checks: { step_count: 0, final_hash_valid: false },
  });
});

t.test('tampering and malformed input: the closed failure enum, never a throw', async (t) => {
  const cases: [string, (p: any) => unknown, number, string, string][] = [
    [
      'document_hash',
      (p) => ({ ...p, document_hash: `sha512:${'1'.repeat(128)}` }),
      5,
      'SignatureMismatch',
      'DoesNotVerify',
    ],
    [
      'destroyed_at',
      (p) => ({ ...p, destruction: { ...p.destruction, destroyed_at: '2020-01-01T00:00:00.000000Z' } }),
      3,
      'FinalHashMismatch',
      'DoesNotMatchStep8',
    ],
    [
      'final_hash',
      (p) => ({ ...p, destruction: { ...p.destruction, final_hash: `sha512:${'2'.repeat(128)}` } }),
      3,
      'FinalHashMismatch',
      'DoesNotMatchStep8',
    ],
    ['steps', (p) => ({ ...p, destruction: { ...p.destruction, steps: 7 } }), 1, 'StepCountInvalid', 'NotEightSteps'],
    [
      'partial with 8',
      (p) => ({ ...p, destruction: { ...p.destruction, completeness: 'partial', steps: 3 } }),
      1,
      'StepCountInvalid',
      'NotEightSteps',
    ],
    ['version', (p) => ({ ...p, cdp_version: '3.0' }), 0, 'VersionUnsupported', 'UnknownVersion'],
    ['no attestation', (p) => ({ ...p, attestation: undefined }), 0, 'FormatInvalid', 'MissingField'],
    [
      'algorithm',
      (p) => ({ ...p, attestation: { ...p.attestation, algorithm: 'RSA' } }),
      5,
      'KeyInvalid',
      'UnsupportedAlgorithm',
    ],
    [
      'public key',
      (p) => ({ ...p, attestation: { ...p.attestation, public_key: 'base64:AAAA' } }),
      5,
      'KeyInvalid',
      'MalformedPublicKey',
    ],
    [
      'signature',
      (p) => ({ ...p, attestation: { ...p.attestation, signature: 'base64:AAAA' } }),
      5,
      'SignatureMismatch',
      'MalformedSignature',
    ],
    ['other key', (p) => ({ ...p, attestation: presentation().attestation }), 5, 'SignatureMismatch', 'DoesNotVerify'],
    ['hash format', (p) => ({ ...p, document_hash: 'sha512:XYZ' }), 0, 'FormatInvalid', 'BadHashFormat'],
    ['steps type', (p) => ({ ...p, destruction: { ...p.destruction, steps: '8' } }), 0, 'FormatInvalid', 'WrongType'],
    ['not a presentation', () => toAuditProof(emitRecord(recordInput(), key())), 0, 'FormatInvalid', 'NotAnObject'],
    ['array', () => [], 0, 'FormatInvalid', 'NotAnObject'],
  ];
  for (const [name, change, stage, type, reason] of cases) {
    const r = verifyPresentation(JSON.parse(JSON.stringify(change(presentation()) ?? null)), { now });
    t.same(
      r,
      { valid: false, scope: 'reduced', stage_reached: stage, failure_reason: { type, reason }, verified_at: now() },
      name,
    );
    t.ok(FAILURE_ENUM[type]?.includes(reason), `${type}/${reason} is in the closed enum`);
  }
});
