// The signed destruction statement: derived from the step evidence by the
// emitter, read back against the component proofs by every verifier path of
// the library, worded in the one-line verdict.
import t from 'tap';
import { readFileSync } from 'node:fs';
import {
  destructionFromEvidence,
  emitRecord,
  generateEphemeralKey,
  toAuditProof,
  toPresentation,
  verdictSummary,
  verifyPresentation,
  verifyProof,
  MAX_REASON_CHARS,
  NO_COMPONENT_PROOF,
  PERFORMED_FALSE,
} from '../../shared/proof/index.js';
import { destructionVectors, vectorFileText } from './destruction-vectors.js';
import { recordInput, seededRandom } from './fixtures.js';
import { VECTOR_DIR, vectorDoc, withoutVerifiedAt } from './helpers.js';

const key = () => ({ mode: 'ephemeral' as const, key: generateEphemeralKey(seededRandom(7)) });
const performedAll = () => {
  const input = recordInput();
  input.evidence[4] = { performed: true };
  return input;
};

t.test('the destruction vectors on disk are exactly what the generator builds', async (t) => {
  const vs = destructionVectors();
  t.ok(vs.length >= 4);
  for (const v of vs) {
    t.equal(readFileSync(`${VECTOR_DIR}destruction/${v.file}`, 'utf8'), vectorFileText(v), v.file);
    t.strictSame(withoutVerifiedAt(verifyProof(v.document)), v.expect, `${v.file}: ${v.description}`);
  }
});

t.test('emitter: statement derived from evidence, caller values ignored', async (t) => {
  const ok = emitRecord(performedAll(), key());
  t.strictSame(ok.termination, { trigger: 'customer_request', command_was_running: false, destruction: 'complete' });

  const input = performedAll();
  input.termination = { ...input.termination!, destruction: 'complete' };
  input.evidence[2] = { performed: false, reason: '  ENOSPC while overwriting /data/output/big.bin  ' };
  input.evidence[3] = { keys_zeroized: 0 }; // no `performed`: no component proof
  input.evidence[7] = { performed: false }; // step 8 says it did not happen, no reason
  const r = emitRecord(input, key());
  t.equal(r.termination!.destruction, 'incomplete', 'the caller cannot state "complete"');
  t.strictSame(r.termination!.incomplete_steps, [
    { step: 3, reason: 'ENOSPC while overwriting /data/output/big.bin' },
    { step: 4, reason: NO_COMPONENT_PROOF },
    { step: 8, reason: PERFORMED_FALSE },
  ]);
  t.notOk('memory_wipe' in r.component_proofs!, 'no component proof for step 3');
  const v = verifyProof(toAuditProof(r));
  t.match(v, { valid: true, destruction: 'incomplete' });
  t.notOk('destruction_contradicted' in v, 'the emitter never contradicts itself');
  t.equal(
    verdictSummary(v),
    'AuditProof verified; destruction reported incomplete (step 3: ENOSPC while overwriting /data/output/big.bin; ' +
      `step 4: ${NO_COMPONENT_PROOF}; step 8: ${PERFORMED_FALSE})`,
  );
});

t.test('emitter: reasons are bounded, steps 7 and 8 need no performed flag', async (t) => {
  const ev = performedAll().evidence;
  ev[2] = { performed: false, reason: 'x'.repeat(10_000) };
  const s = destructionFromEvidence(ev);
  t.equal(s.destruction, 'incomplete');
  t.equal(Array.from(s.incomplete_steps![0]!.reason).length, MAX_REASON_CHARS);
  t.strictSame(destructionFromEvidence(performedAll().evidence), { destruction: 'complete' });
  t.strictSame(
    destructionFromEvidence([]).incomplete_steps!.map((x) => x.step),
    [1, 2, 3, 4, 5, 6],
  );
});

t.test('old documents without a statement: verified, nothing stated, plain verdict', async (t) => {
  for (const name of ['valid-2.1-record.json', 'valid-2.0.json', 'valid-1.0.json']) {
    const r = verifyProof(vectorDoc(name));
    t.equal(r.valid, true, name);
    t.notOk('destruction' in r, `${name}: no destruction member in the result`);
    t.equal(verdictSummary(r), 'AuditProof verified', name);
  }
});

t.test('a 1.0 document: termination is not signed, so a statement there is not read', async (t) => {
  const d = vectorDoc('valid-1.0.json');
  d.termination = { ...(d.termination ?? {}), destruction: 'incomplete', incomplete_steps: 'junk' };
  const r = verifyProof(d);
  t.equal(r.valid, true);
  t.notOk('destruction' in r);
});

t.test('malformed statements fail stage 0 with the closed enum', async (t) => {
  const base = toAuditProof(emitRecord(performedAll(), key())) as unknown as Record<string, any>;
  const cases: [string, (term: Record<string, any>) => void, string][] = [
    ['steps on a complete statement', (x) => (x.incomplete_steps = [{ step: 3, reason: 'r' }]), 'WrongType'],
    [
      'steps without a statement',
      (x) => {
        delete x.destruction;
        x.incomplete_steps = [{ step: 3, reason: 'r' }];
      },
      'WrongType',
    ],
    [
      'empty list',
      (x) => {
        x.destruction = 'incomplete';
        x.incomplete_steps = [];
      },
      'WrongType',
    ],
    [
      'descending steps',
      (x) => {
        x.destruction = 'incomplete';
        x.incomplete_steps = [
          { step: 6, reason: 'r' },
          { step: 3, reason: 'r' },
        ];
      },
      'WrongType',
    ],
    [
      'step 9',
      (x) => {
        x.destruction = 'incomplete';
        x.incomplete_steps = [{ step: 9, reason: 'r' }];
      },
      'WrongType',
    ],
    [
      'empty reason',
      (x) => {
        x.destruction = 'incomplete';
        x.incomplete_steps = [{ step: 3, reason: '' }];
      },
      'WrongType',
    ],
    [
      'no reason',
      (x) => {
        x.destruction = 'incomplete';
        x.incomplete_steps = [{ step: 3 }];
      },
      'MissingField',
    ],
  ];
  for (const [name, mutate, reason] of cases) {
    const d = structuredClone(base);
    mutate(d.termination);
    t.match(
      verifyProof(d),
      { valid: false, stage_reached: 0, failure_reason: { type: 'FormatInvalid', reason } },
      name,
    );
  }
});

t.test('presentation projection: the statement read as stated, in the reduced-scope verdict', async (t) => {
  const input = performedAll();
  input.evidence[2] = { performed: false, reason: 'ENOSPC' };
  const pres = toPresentation(emitRecord(input, key()));
  const r = verifyPresentation(pres);
  t.match(r, {
    valid: true,
    scope: 'reduced',
    destruction: 'incomplete',
    incomplete_steps: [{ step: 3, reason: 'ENOSPC' }],
  });
  t.match(
    verdictSummary(r),
    /^AuditProof verified at reduced scope \(.*\); destruction reported incomplete \(step 3: ENOSPC\)$/,
  );
});
