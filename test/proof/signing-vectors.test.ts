// Managed-authority vectors: the committed files are what the emitter produces,
// and the verifier (stage 6 against each vector's manifest) and the offline CLI
// give each its expected verdict.
import t from 'tap';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verdictLine, verifyProof } from '../../shared/proof/index.js';
import { buildSigningVectors, SIGNING_VECTOR_DIR } from './signing-vectors.js';
import { CLI } from './helpers.js';

const committed = (): Record<string, any> =>
  Object.fromEntries(
    readdirSync(SIGNING_VECTOR_DIR)
      .filter((f) => f.endsWith('.json'))
      .map((f) => [f, JSON.parse(readFileSync(SIGNING_VECTOR_DIR + f, 'utf8'))]),
  );

t.test('the committed vectors are what the emitter produces', async (t) => {
  t.strictSame(committed(), JSON.parse(JSON.stringify(buildSigningVectors())));
});

t.test('every vector verifies to its expect against its manifest', async (t) => {
  const vs = committed();
  t.equal(Object.keys(vs).length, 5);
  for (const [name, v] of Object.entries(vs)) {
    const r = verifyProof(v.document, { manifest: v.manifest });
    const { verified_at: _at, ...rest } = r;
    t.strictSame(JSON.parse(JSON.stringify(rest)), v.expect, name);
    t.notMatch(verdictLine(r), /destruction verified/i);
    // Without a manifest every one of them is a valid, signed document: stage 6 is what differs.
    t.ok(verifyProof(v.document).valid, `${name} without a manifest`);
  }
});

t.test('the CLI: --trust-manifest FILE, --json names the resolved authority and key version', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sig-vec-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  for (const [name, v] of Object.entries(committed())) {
    const proof = join(dir, `${name}.proof.json`);
    const manifest = join(dir, `${name}.manifest.json`);
    writeFileSync(proof, JSON.stringify(v.document));
    writeFileSync(manifest, JSON.stringify(v.manifest));
    const j = spawnSync(process.execPath, [CLI, 'verify', '--json', '--trust-manifest', manifest, proof], {
      encoding: 'utf8',
    });
    const out = JSON.parse(j.stdout);
    const h = spawnSync(process.execPath, [CLI, 'verify', '--trust-manifest', manifest, proof], { encoding: 'utf8' });
    if (v.expect.valid) {
      t.equal(j.status, 0, name);
      t.equal(out.signing_authority_id, v.document.signing_authority_id, `${name}: authority`);
      t.equal(out.signing_key_version, v.document.signing_key_version, `${name}: key version`);
      t.equal(out.key_resolved, true);
      t.match(h.stdout, /AuditProof verified/);
      t.match(h.stdout, new RegExp(`authority acme-eu-1 v${v.document.signing_key_version} resolved`));
    } else {
      t.equal(j.status, 1, name);
      t.equal(out.stage_reached, 6);
      t.strictSame(out.failure_reason, v.expect.failure_reason, name);
      t.notOk('signing_authority_id' in out, 'no authority claimed for an unresolved key');
      t.match(
        h.stdout,
        new RegExp(`stage 6 \\(key resolution\\) failed: KeyResolution/${v.expect.failure_reason.reason}`),
      );
    }
  }
});
