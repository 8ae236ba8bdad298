// A wipe that did not fully happen shows in the signed view and in every
// verifier's verdict, over real HTTP against a real runner on both databases.
// The runner's step 3 evidence saying `performed: false` with a reason is
// injected into the real destroy result (the runner path that produces it is
// exercised by the runner's own tests).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verdictSummary, verifyProof } from '../../shared/proof/index.js';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, start, type Api } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const REASON = '1 file under directories nested past PATH_MAX was not read or overwritten (ENAMETOOLONG)';
const INCOMPLETE_LINE = `AuditProof verified; destruction reported incomplete (step 3: ${REASON})`;

function cliVerify(doc: unknown): { status: number | null; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'cp-verify-'));
  try {
    writeFileSync(join(dir, 'proof.json'), JSON.stringify(doc));
    const r = spawnSync(process.execPath, [CLI, 'verify', join(dir, 'proof.json')], { encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The real runner, except that destroying a capsule in `failWipe` reports step 3 as not performed. */
function withFailedWipe(c: RunnerPort, failWipe: Set<string>): RunnerPort {
  return {
    hello: () => c.hello(),
    create: (r) => c.create(r),
    exec: (r) => c.exec(r),
    upload: (id, f, b) => c.upload(id, f, b),
    listOutput: (id) => c.listOutput(id),
    readOutput: (id, f) => c.readOutput(id, f),
    destroy: async (id) => {
      const r = await c.destroy(id);
      if (failWipe.has(id)) r.evidence[2] = { ...(r.evidence[2] ?? {}), performed: false, reason: REASON };
      return r;
    },
    list: () => c.list(),
    close: () => c.close(),
  };
}

async function create(api: Api, key: string): Promise<any> {
  const r = await api.req('POST', '/v1/capsules', { key, json: {} });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
  return r.body;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: destruction statement end to end`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const failWipe = new Set<string>();
    const s = await start(driver, withFailedWipe(runner.client, failWipe), { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup();

    await t.test('a normal destroy states "complete"; the verdict is plain', async (t) => {
      const c = await create(api, alice.key);
      await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: 'echo hi > /tmp/x' } });
      const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(d.status, 200, d.text);
      t.equal(d.body.cdp.termination.destruction, 'complete', JSON.stringify(d.body.cdp.termination));
      t.notOk('incomplete_steps' in d.body.cdp.termination);
      const online = await api.req('POST', '/v1/verify', { json: { cdp: d.body.audit_proof } });
      t.equal(online.body.summary, 'AuditProof verified');
      t.equal(online.body.destruction, 'complete');
    });

    await t.test('a wipe that reports performed: false is stated, offline and online', async (t) => {
      const c = await create(api, alice.key);
      await api.req('POST', `/v1/capsules/${c.id}/upload?filename=a.csv`, { key: alice.key, raw: 'a,b\n' });
      failWipe.add(c.id);
      const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(d.status, 200, d.text);
      const term = d.body.audit_proof.termination;
      t.equal(term.destruction, 'incomplete', 'in the shareable AuditProof');
      t.strictSame(term.incomplete_steps, [{ step: 3, reason: REASON }]);
      t.notOk('memory_wipe' in d.body.audit_proof.component_proofs, 'no component proof for step 3');

      // Offline: the library and the CLI.
      const v = verifyProof(d.body.audit_proof);
      t.equal(verdictSummary(v), INCOMPLETE_LINE);
      const cli = cliVerify(d.body);
      t.equal(cli.status, 0, cli.out);
      t.match(cli.out, `cdp: ${INCOMPLETE_LINE}`);
      t.match(cli.out, `audit_proof: ${INCOMPLETE_LINE}`);

      // Online: POST /v1/verify (AuditProof, the public document with its trail, the presentation) and the stored proof.
      const online = await api.req('POST', '/v1/verify', { json: { cdp: d.body.audit_proof } });
      t.equal(online.status, 200);
      t.match(online.body, { valid: true, destruction: 'incomplete', summary: INCOMPLETE_LINE });
      const pub = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify`);
      t.equal((await api.req('POST', '/v1/verify', { json: { cdp: pub.body } })).body.summary, INCOMPLETE_LINE);
      const pres = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify?format=presentation`);
      const pv = await api.req('POST', '/v1/verify', { json: { cdp: pres.body } });
      t.match(
        pv.body.summary,
        /^AuditProof verified at reduced scope \(.*\); destruction reported incomplete \(step 3: /,
      );
      const stored = await api.req('GET', `/v1/proofs/${c.id}`, { key: alice.key });
      t.equal(stored.body.verified, true);
      t.equal(stored.body.verified_summary, INCOMPLETE_LINE);

      // Flipped to "complete" after signing: no verifier accepts it.
      const flipped = structuredClone(d.body.audit_proof);
      flipped.termination.destruction = 'complete';
      delete flipped.termination.incomplete_steps;
      const fv = await api.req('POST', '/v1/verify', { json: { cdp: flipped } });
      t.equal(fv.body.valid, false);
      t.match(fv.body.summary, /^AuditProof NOT verified/);
      t.equal(cliVerify(flipped).status, 1);
    });
  });
}
