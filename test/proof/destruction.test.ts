// Destruction status (docs/PROOF_FORMAT.md "Destruction status"): a step that
// did not fully happen is stated in the signed view, and every verifier's
// summary line says so.
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import {
  emitRecord,
  generateEphemeralKey,
  incompleteSteps,
  verdictLine,
  verifyProof,
  toPresentation,
  verifyPresentation,
  type AuditRecord,
} from '../../shared/proof/index.js';
import { buildDestructionVectors, DESTRUCTION_VECTOR_DIR } from './destruction-vectors.js';
import { recordInput, seededRandom } from './fixtures.js';
import { CLI, proofVectors, vectorDoc } from './helpers.js';

const committed = () =>
  Object.fromEntries(
    readdirSync(DESTRUCTION_VECTOR_DIR)
      .filter((f) => f.endsWith('.json'))
      .map((f) => [f, JSON.parse(readFileSync(DESTRUCTION_VECTOR_DIR + f, 'utf8'))]),
  );

t.test('the committed vectors are what the emitter produces', async (t) => {
  t.strictSame(committed(), JSON.parse(JSON.stringify(buildDestructionVectors())));
});

t.test('every vector verifies to its expect and prints its summary line', async (t) => {
  const vs = committed();
  t.ok(Object.keys(vs).length >= 6);
  for (const [name, v] of Object.entries(vs)) {
    const r = verifyProof(v.document);
    const { verified_at: _at, ...rest } = r;
    t.strictSame(JSON.parse(JSON.stringify(rest)), v.expect, name);
    t.equal(verdictLine(r), v.summary, `${name} summary`);
    t.notMatch(verdictLine(r), /destruction verified/i);
  }
});

t.test('the rule: performed:false steps, with their reason or a generic one', async (t) => {
  t.same(incompleteSteps([{ performed: true }, { note: 'no flag' }, { performed: false, method: 'm' }]), [
    { step: 3, reason: 'step 3 not performed (m)' },
  ]);
  const long = 'x'.repeat(2000);
  t.equal(incompleteSteps([{ performed: false, reason: long }])[0]!.reason.length, 500, 'reason bounded');
});

t.test('documents older than the statement stay valid and say nothing about it', async (t) => {
  for (const v of proofVectors().filter((x) => x.expect['valid'] === true)) {
    const r = verifyProof(v.document);
    t.ok(r.valid, v.name);
    t.notOk('destruction' in r, `${v.name}: no destruction report`);
  }
});

t.test('the CLI line, offline', async (t) => {
  const r = spawnSync(process.execPath, [CLI, 'verify', DESTRUCTION_VECTOR_DIR + 'valid-incomplete-one-step.json'], {
    encoding: 'utf8',
  });
  t.equal(r.status, 0);
  t.match(r.stdout, /AuditProof verified; destruction reported incomplete \(step 3: 2 entries not overwritten/);
  const json = spawnSync(
    process.execPath,
    [CLI, 'verify', '--json', DESTRUCTION_VECTOR_DIR + 'valid-incomplete-one-step.json'],
    {
      encoding: 'utf8',
    },
  );
  t.match(JSON.parse(json.stdout), { valid: true, destruction: { status: 'incomplete' } });
});

t.test('the presentation projection states it too (reduced scope)', async (t) => {
  const evidence = recordInput().evidence.map((e) => ({ ...e }));
  evidence[2] = { ...evidence[2], performed: false, reason: 'ENOSPC' };
  const rec: AuditRecord = emitRecord(
    { ...recordInput(), evidence },
    { mode: 'ephemeral', key: generateEphemeralKey(seededRandom(5)) },
  );
  const r = verifyPresentation(toPresentation(rec));
  t.ok(r.valid);
  t.match(
    verdictLine(r),
    /^AuditProof verified at reduced scope; destruction reported incomplete \(step 3: ENOSPC; step 5: /,
  );
});

t.test(
  'legacy session form with steps 1-7 zeroed: verified only at reduced scope, no chain integrity claimed',
  async (t) => {
    const doc = vectorDoc('valid-legacy-session.json');
    for (let i = 0; i < 7; i++) doc.chain[i].chain_hash = 'sha256:' + '0'.repeat(64);
    const r = verifyProof(doc);
    t.ok(r.valid, 'only the final hash is signed in this form');
    if (!r.valid) return;
    t.equal(r.scope, 'reduced');
    t.equal(r.checks.chain_integrity, false, 'a chain that was not recomputed is not claimed intact');
    t.equal(r.checks.chain_recomputed, false);
    t.match(verdictLine(r), /^AuditProof verified at reduced scope; legacy session form/);
  },
);
