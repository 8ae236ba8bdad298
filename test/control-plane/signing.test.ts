// Managed signing authority over real HTTP against a real sandbox runner:
// key files generated here (node:crypto), proofs signed by the authority's
// highest available version, rotation without restart, the trust manifest
// and key records served publicly, and the offline CLI resolving proofs
// against the manifest fetched by URL.
import t from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyProof } from '../../shared/proof/index.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, envelope, start, type Api } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const AUTHORITY = 'acme-test';

/** The CLI run asynchronously: the server it fetches from lives in this process. */
function runCli(args: string[]): Promise<{ status: number | null; stdout: string; stderr: string }> {
  return new Promise((res) => {
    const p = spawn(process.execPath, [CLI, ...args]);
    let stdout = '';
    let stderr = '';
    p.stdout.on('data', (d) => (stdout += d));
    p.stderr.on('data', (d) => (stderr += d));
    p.on('close', (status) => res({ status, stdout, stderr }));
  });
}

/** A fresh Ed25519 key as an operator would write it (PKCS#8 PEM), and its raw public key in base64. */
function keyFile(path: string): string {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  return spki.subarray(spki.length - 32).toString('base64');
}

async function createAndDestroy(api: Api, key: string): Promise<any> {
  const c = await api.req('POST', '/v1/capsules', { key, json: {} });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
  if (d.status !== 200) throw new Error(`destroy: ${d.status} ${d.text}`);
  return d.body;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: managed signing authority`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'signing-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const v1 = join(dir, 'v1.pem');
    const v2 = join(dir, 'v2.pem');
    const pub1 = keyFile(v1);
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    // Version 2 is listed before its file exists: rotation is writing it.
    const s = await start(driver, runner.client, {
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_SIGNING_AUTHORITY_ID: AUTHORITY,
      CAPSULE_SIGNING_KEY_FILES: `1:${v1},2:${v2}`,
    });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup();

    const m1 = await api.req('GET', '/v1/trust-manifest');
    t.equal(m1.status, 200);
    t.strictSame(m1.body, {
      authorities: [{ signing_authority_id: AUTHORITY, keys: [{ signing_key_version: 1, public_key: pub1 }] }],
    });

    const d1 = await createAndDestroy(api, alice.key);
    t.equal(d1.cdp.signing_authority_id, AUTHORITY);
    t.equal(d1.cdp.signing_key_version, 1);
    t.equal(d1.cdp.attestation.key_id, `svc-authority-${AUTHORITY}-v1`);
    t.equal(d1.cdp.attestation.public_key, `base64:${pub1}`);
    t.equal(d1.audit_proof.signing_key_version, 1);
    t.ok(verifyProof(d1.cdp, { manifest: m1.body }).valid, 'destroy proof resolves against the manifest');
    t.ok(verifyProof(d1.audit_proof, { manifest: m1.body }).valid, 'audit_proof resolves too');

    const k1 = await api.req('GET', `/v1/keys/svc-authority-${AUTHORITY}-v1`);
    t.equal(k1.status, 200);
    t.equal(k1.body.public_key, pub1);
    t.equal(k1.body.signing_authority_id, AUTHORITY);
    t.equal(k1.body.signing_key_version, 1);
    envelope(t, await api.req('GET', `/v1/keys/svc-authority-${AUTHORITY}-v9`), 404, 'resource_not_found');

    // Rotation without restart: the version-2 file appears.
    const pub2 = keyFile(v2);
    const d2 = await createAndDestroy(api, alice.key);
    t.equal(d2.cdp.signing_key_version, 2, 'new proofs use the new version');
    t.equal(d2.cdp.attestation.key_id, `svc-authority-${AUTHORITY}-v2`);
    t.equal(d2.cdp.attestation.public_key, `base64:${pub2}`);
    const m2 = (await api.req('GET', '/v1/trust-manifest')).body;
    t.strictSame(m2.authorities[0].keys, [
      { signing_key_version: 1, public_key: pub1 },
      { signing_key_version: 2, public_key: pub2 },
    ]);
    t.ok(verifyProof(d1.cdp, { manifest: m2 }).valid, 'the old proof still verifies and resolves');
    t.ok(verifyProof(d2.cdp, { manifest: m2 }).valid, 'the new proof resolves');
    const old = verifyProof(d2.cdp, { manifest: m1.body });
    t.equal(old.valid ? '' : old.failure_reason.reason, 'UnknownKeyVersion', 'v2 against the v1-only manifest');
    t.equal((await api.req('GET', `/v1/keys/svc-authority-${AUTHORITY}-v2`)).body.public_key, pub2);

    // The offline CLI fetches the manifest by URL and names the resolved authority and version.
    const proofFile = join(dir, 'p1.json');
    writeFileSync(proofFile, JSON.stringify(d1));
    const cli = await runCli(['verify', '--json', '--trust-manifest', `${api.base}/v1/trust-manifest`, proofFile]);
    t.equal(cli.status, 0, cli.stderr);
    const lines = cli.stdout
      .trim()
      .split('\n')
      .map((l) => JSON.parse(l));
    t.equal(lines.length, 2, 'cdp and audit_proof');
    for (const l of lines) {
      t.equal(l.valid, true);
      t.equal(l.signing_authority_id, AUTHORITY);
      t.equal(l.signing_key_version, 1);
      t.equal(l.key_resolved, true);
    }
    const human = await runCli(['verify', '--trust-manifest', `${api.base}/v1/trust-manifest`, proofFile]);
    t.match(human.stdout, /AuditProof verified/);
    t.notMatch(human.stdout, /destruction verified/i);
    const bad = await runCli(['verify', '--trust-manifest', `${api.base}/v1/nope`, proofFile]);
    t.equal(bad.status, 2, 'an unreachable manifest URL is a usage error');
    t.match(bad.stderr, /trust manifest .*HTTP 404/);

    // Two-phase signing: the key stops parsing mid-run. The destroy still wipes and stores the
    // unsigned proof with the status move, answers 503 with the mode, and loses nothing.
    writeFileSync(v2, 'not a key\n');
    const c = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
    t.equal(c.status, 201);
    const id = c.body.id;
    const refused = await api.req('DELETE', `/v1/capsules/${id}`, { key: alice.key });
    const e = envelope(t, refused, 503, 'service_unavailable');
    t.equal(e.degradation_mode, 'signing_key_unavailable');
    t.ok(Number(refused.headers.get('retry-after')) > 0, 'Retry-After');
    t.notMatch(refused.text, /PRIVATE KEY/);
    const wiped = await api.req('GET', `/v1/capsules/${id}`, { key: alice.key });
    t.equal(wiped.body.status, 'destroyed', 'the wipe happened; only the proof waits');
    envelope(
      t,
      await api.req('POST', `/v1/capsules/${id}/exec`, { key: alice.key, json: { command: 'true' } }),
      410,
      'capsule_expired',
    );
    const waiting = await api.req('GET', `/v1/proofs/${id}`, { key: alice.key });
    t.equal(envelope(t, waiting, 503, 'service_unavailable').degradation_mode, 'signing_key_unavailable');
    const bob = await api.signup();
    envelope(t, await api.req('GET', `/v1/proofs/${id}`, { key: bob.key }), 404, 'resource_not_found');
    const again = await api.req('DELETE', `/v1/capsules/${id}`, { key: alice.key });
    t.equal(envelope(t, again, 503, 'service_unavailable').degradation_mode, 'signing_key_unavailable', 'a repeat too');
    t.equal(await s.cp.services.destruction.signPending(), 0, 'nothing signs while the key is away');

    // The key is back (a new version-2 file): the sweeper signs the buffered proof, once.
    const pub2b = keyFile(v2);
    let proof = await api.req('GET', `/v1/proofs/${id}`, { key: alice.key });
    for (let i = 0; i < 100 && proof.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 50));
      proof = await api.req('GET', `/v1/proofs/${id}`, { key: alice.key });
    }
    t.equal(proof.status, 200, proof.text.slice(0, 200));
    t.equal(proof.body.cdp.attestation.public_key, `base64:${pub2b}`);
    t.equal(proof.body.cdp.destroyed_at, wiped.body.destroyed_at, 'signed as fixed at the wipe');
    t.ok(verifyProof(proof.body.cdp, { manifest: (await api.req('GET', '/v1/trust-manifest')).body }).valid);
    const d3 = await api.req('DELETE', `/v1/capsules/${id}`, { key: alice.key });
    t.equal(d3.status, 200, 'after the outage a repeated DELETE gets the stored destroy response');
    t.strictSame(d3.body.cdp, proof.body.cdp);
    t.equal(d3.body.status, 'destroyed');
    t.ok(verifyProof(d3.body.audit_proof).valid);
    t.equal(await s.cp.services.destruction.signPending(), 0, 'signed once');
    envelope(t, await api.req('DELETE', `/v1/capsules/${d1.capsule_id}`, { key: alice.key }), 409, 'resource_conflict');
  });
}
