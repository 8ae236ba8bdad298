// A wipe that did not fully happen, end to end: a real capsule fills its tmpfs
// around a sparse file on a runner without the extent helper, so the wipe
// meets ENOSPC. The signed AuditProof must say so (termination.destruction),
// list no regulatory provision beside the step that did not happen, and every
// verifier's line must state it: online, offline, and the stored proof.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyProof, verdictLine } from '../../shared/proof/index.js';
import { startRunner } from '../helpers/runner.js';
import { start } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

// Fills /data (the capsule tmpfs) around an 8 MiB sparse file with data in three places.
const FILL = String.raw`
import os
f = os.open("/data/output/sparse", os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 8 << 20)
for off in (0, 3 << 20, (8 << 20) - 4096):
    os.pwrite(f, b"HOLE-SECRET" * 300, off)
os.close(f)
try:
    with open("/data/output/fill", "wb") as g:
        while True:
            g.write(b"FILL" * 16384)
            g.flush()
except OSError as e:
    print("full", e.errno == 28)
`;

t.test('an incomplete wipe is stated in the signed proof and by every verifier', async (t) => {
  const runner = await startRunner({ options: { tmpfs_mb: '16', wipe_sparse_helper: '0' } });
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client);
  t.teardown(() => s.close());
  const { api } = s;
  const alice = await api.signup();
  const c = await api.req('POST', '/v1/capsules', { key: alice.key, json: { data_classification: 'PHI' } });
  t.equal(c.status, 201, c.status === 201 ? 'created' : c.text);
  const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, {
    key: alice.key,
    json: { command: `python3 -c '${FILL}'` },
  });
  t.equal(ex.status, 200, ex.status === 200 ? 'exec' : ex.text);
  t.match(ex.body.stdout, /full True/, 'the tmpfs is full inside');

  const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: alice.key });
  t.equal(d.status, 200, d.status === 200 ? 'destroyed' : d.text);
  const proof = d.body.audit_proof;
  t.equal(proof.termination.destruction, 'incomplete', 'stated in the signed view');
  t.match(proof.termination.incomplete_steps, [{ step: 3, reason: /ENOSPC/ }]);
  t.notOk(
    proof.regulatory_context.mappings.some((m: { step: number }) => m.step === 3),
    'no provision listed beside the step that did not happen',
  );
  t.notOk('memory_wipe' in proof.component_proofs, 'no component proof for it either');

  const offline = verifyProof(proof);
  t.ok(offline.valid);
  t.match(verdictLine(offline), /^AuditProof verified; destruction reported incomplete \(step 3: .*ENOSPC/);

  const online = await api.req('POST', '/v1/verify', { json: { cdp: proof } });
  t.equal(online.body.valid, true);
  t.match(online.body.summary, /destruction reported incomplete \(step 3: /);
  t.match(online.body.destruction, { status: 'incomplete' });

  const stored = await api.req('GET', `/v1/proofs/${c.body.id}`, { key: alice.key });
  t.equal(stored.body.verified, true);
  t.match(stored.body.summary, /^AuditProof verified; destruction reported incomplete \(step 3: /);

  const dir = mkdtempSync(join(tmpdir(), 'destruction-status-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  writeFileSync(join(dir, 'p.json'), JSON.stringify(proof));
  const cli = spawnSync(process.execPath, [CLI, 'verify', join(dir, 'p.json')], { encoding: 'utf8' });
  t.equal(cli.status, 0, cli.stderr);
  t.match(cli.stdout, /AuditProof verified; destruction reported incomplete \(step 3: /);
  t.notMatch(cli.stdout, /destruction verified/i);
});
