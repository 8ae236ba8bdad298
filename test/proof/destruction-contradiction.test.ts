// A signed destruction statement that contradicts the document's component
// proofs (docs/PROOF_FORMAT.md "Destruction status"): verified, but never
// reported as more destruction than the document shows.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import {
  canonicalHash,
  emitRecord,
  generateEphemeralKey,
  toAuditProof,
  toBase64,
  verdictLine,
  verifyProof,
} from '../../shared/proof/index.js';
import { ed25519Sign } from '../../shared/proof/crypto.js';
import { NO_COMPONENT_PROOF } from '../../shared/proof/destruction.js';
import { recordInput, seededRandom } from './fixtures.js';
import { vectorDoc } from './helpers.js';

const SEED = 11;

function emitted(mutate: (ev: Record<string, unknown>[]) => void = () => {}): Record<string, any> {
  const input = recordInput();
  input.evidence[4] = { performed: true };
  mutate(input.evidence);
  const rec = emitRecord(input, { mode: 'ephemeral', key: generateEphemeralKey(seededRandom(SEED)) });
  return toAuditProof(rec) as unknown as Record<string, any>;
}

/** Re-signs with the same key after a change: what a lying or faulty signer could produce. */
function resign(doc: Record<string, any>): Record<string, any> {
  const key = generateEphemeralKey(seededRandom(SEED));
  delete doc['attestation'].signature;
  doc['canonical_hash'] = canonicalHash(doc);
  doc['attestation'].signature =
    'base64:' + toBase64(ed25519Sign(new TextEncoder().encode(doc['canonical_hash'].slice(7)), key.privateKey));
  return doc;
}

t.test('the emitter never contradicts itself', async (t) => {
  for (const doc of [emitted(), emitted((ev) => (ev[2] = { performed: false, reason: 'ENOSPC' }))]) {
    const r = verifyProof(doc);
    t.equal(r.valid, true);
    if (r.valid) t.notOk(r.destruction?.contradicted, JSON.stringify(r.destruction));
  }
});

t.test('signed "complete" while step 3 has no component proof: reported incomplete, flagged', async (t) => {
  const doc = emitted((ev) => (ev[2] = { performed: false, reason: 'ENOSPC' }));
  doc['termination'].destruction = 'complete';
  delete doc['termination'].incomplete_steps;
  const unsigned = structuredClone(doc);
  unsigned['canonical_hash'] = canonicalHash(unsigned);
  t.match(
    verifyProof(unsigned),
    { valid: false, stage_reached: 5, failure_reason: { type: 'SignatureMismatch', reason: 'DoesNotVerify' } },
    'flipped after signing: the signature fails first',
  );
  const r = verifyProof(resign(doc));
  t.equal(r.valid, true, 'the document is intact as signed');
  if (!r.valid) return;
  t.strictSame(r.destruction, {
    status: 'incomplete',
    incomplete_steps: [{ step: 3, reason: NO_COMPONENT_PROOF }],
    contradicted: true,
  });
  t.equal(
    verdictLine(r),
    `AuditProof verified; destruction reported incomplete (step 3: ${NO_COMPONENT_PROOF}); ` +
      'its destruction statement disagrees with its component proofs',
  );
});

t.test('signed "incomplete" for a step that has its component proof: kept incomplete, flagged', async (t) => {
  const doc = emitted();
  doc['termination'].destruction = 'incomplete';
  doc['termination'].incomplete_steps = [{ step: 1, reason: 'said so' }];
  const r = verifyProof(resign(doc));
  t.match(r, { valid: true, destruction: { status: 'incomplete', contradicted: true } });
});

t.test('documents without a statement are not read against their component proofs', async (t) => {
  for (const name of ['valid-2.1-record.json', 'valid-2.0.json', 'valid-2.1-without-activity.json']) {
    const r = verifyProof(vectorDoc(name));
    t.equal(r.valid, true, name);
    t.notOk('destruction' in r, name);
  }
});

t.test('the Python SDK verifier reads a contradiction exactly as the library does', async (t) => {
  const doc = emitted((ev) => (ev[2] = { performed: false, reason: 'ENOSPC' }));
  doc['termination'].destruction = 'complete';
  delete doc['termination'].incomplete_steps;
  resign(doc);
  const { verified_at: _v, ...expected } = verifyProof(doc) as Record<string, unknown>;
  const file = fileURLToPath(new URL('../../../clients/python/capsule_sdk/verify.py', import.meta.url));
  // The module alone (the package's HTTP client needs httpx, not used here).
  const script = [
    'import importlib.util, json, sys',
    `spec = importlib.util.spec_from_file_location("v", ${JSON.stringify(file)})`,
    'm = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)',
    'r = m.verify_proof(json.load(sys.stdin)); r.pop("verified_at")',
    'print(json.dumps({"result": r, "line": m.verdict_line(r)}))',
  ].join('\n');
  const py = spawnSync('/usr/bin/python3', ['-c', script], { input: JSON.stringify(doc), encoding: 'utf8' });
  t.equal(py.status, 0, py.stderr);
  const out = JSON.parse(py.stdout);
  t.strictSame(out.result, expected);
  t.equal(out.line, verdictLine(verifyProof(doc)));
});
