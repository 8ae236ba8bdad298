// Customer co-signature vectors: the committed file is what the emitter
// produces; an independent check (node:crypto and a hand-written JCS for these
// flat events, nothing from the co-signer or shared/proof's checker) and the
// offline CLI both find exactly the vector's valid, missing and forged entries.
import t from 'tap';
import { createHash, createPublicKey, verify } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyProof } from '../../shared/proof/index.js';
import { buildCosignVectors, COSIGN_VECTOR_DIR } from './cosign-vectors.js';
import { CLI } from './helpers.js';

const committed = (): Record<string, any> =>
  Object.fromEntries(
    readdirSync(COSIGN_VECTOR_DIR)
      .filter((f) => f.endsWith('.json'))
      .map((f) => [f, JSON.parse(readFileSync(COSIGN_VECTOR_DIR + f, 'utf8'))]),
  );

/** RFC 8785 for flat events of strings, integers and booleans: sorted keys, JSON.stringify values. */
const jcsFlat = (o: Record<string, unknown>): string =>
  `{${Object.keys(o)
    .sort()
    .map((k) => `${JSON.stringify(k)}:${JSON.stringify(o[k])}`)
    .join(',')}}`;

t.test('the committed vectors are what the emitter produces', async (t) => {
  t.strictSame(committed(), JSON.parse(JSON.stringify(buildCosignVectors())));
});

t.test('an independent check finds the expected entries; the service proof is untouched', async (t) => {
  for (const [name, v] of Object.entries(committed())) {
    const doc = v.document;
    t.equal(verifyProof(doc).valid, v.expect.proof_valid, `${name}: outside the canonical view and the leaves`);
    const key = createPublicKey(v.customer_public_key);
    const found: Record<string, number[]> = { valid: [], missing: [], forged: [] };
    for (const a of doc.customer_attestations) {
      const ev = doc.activity.find((e: any) => e.seq === a.seq);
      const hash = 'sha512:' + createHash('sha512').update(jcsFlat(ev), 'utf8').digest('hex');
      t.equal(a.event_hash, hash, `${name}: seq ${a.seq} names its event`);
      if (a.status === 'missing') found.missing!.push(a.seq);
      else if (verify(null, Buffer.from(hash, 'utf8'), key, Buffer.from(a.signature, 'base64')))
        found.valid!.push(a.seq);
      else found.forged!.push(a.seq);
    }
    t.strictSame(found, { valid: v.expect.valid, missing: v.expect.missing, forged: v.expect.forged }, name);
  }
});

t.test('the CLI with --customer-key reports the same and exits 1 for the forged entry', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cosign-vec-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const [name, v] of Object.entries(committed())) {
    const doc = join(dir, name);
    const key = join(dir, `${name}.pub.pem`);
    writeFileSync(doc, JSON.stringify(v.document));
    writeFileSync(key, v.customer_public_key);
    const r = spawnSync(process.execPath, [CLI, 'verify', '--json', '--customer-key', key, doc], { encoding: 'utf8' });
    t.equal(r.status, 1, r.stderr);
    const j = JSON.parse(r.stdout.trim());
    t.equal(j.valid, true);
    t.equal(j.customer_attestations.valid, v.expect.valid.length);
    t.strictSame(j.customer_attestations.missing, v.expect.missing);
    t.strictSame(j.customer_attestations.forged, v.expect.forged);
    const human = spawnSync(process.execPath, [CLI, 'verify', '--customer-key', key, doc], { encoding: 'utf8' });
    t.match(human.stdout, /AuditProof verified.*customer co-signatures: 1 valid, 1 missing, 1 forged/);
    t.notMatch(human.stdout, /destruction verified/i);
    const noKey = spawnSync(process.execPath, [CLI, 'verify', '--customer-key', join(dir, 'nope.pem'), doc], {
      encoding: 'utf8',
    });
    t.equal(noKey.status, 2, 'an unreadable key is a usage error');
  }
});
