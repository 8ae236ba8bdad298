// Two-phase signing survives a crash between its phases: `capsule serve`
// with a managed signing key that stops parsing destroys a capsule (503
// signing_key_unavailable, wipe stored), is killed with SIGKILL, and restarts
// with the key back: the buffered proof is signed as fixed at the wipe, a
// repeated DELETE gets it, and it verifies offline against the trust manifest.
import t from 'tap';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, generateKeyPairSync, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeStateDir, reserveUidBlock } from '../helpers/runner.js';
import { DRIVERS, envelope, freshDb, serveProcess, testMasterKeyFile } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const AUTHORITY = 'crash-test';

const exited = (c: ChildProcess): Promise<void> =>
  new Promise((r) => {
    if (c.exitCode !== null || c.signalCode !== null) r();
    else c.once('exit', () => r());
  });

function keyFile(path: string): string {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600 });
  const spki = publicKey.export({ format: 'der', type: 'spki' });
  return spki.subarray(spki.length - 32).toString('base64');
}

for (const driver of DRIVERS) {
  t.test(`${driver}: SIGKILL between the wipe and the signature loses no proof`, async (t) => {
    const db = await freshDb(driver);
    const dataDir = mkdtempSync(join(tmpdir(), 'cp-2phase-'));
    const keyDir = mkdtempSync(join(tmpdir(), 'cp-2phase-keys-'));
    const uids = reserveUidBlock(64);
    const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
    t.teardown(async () => {
      await db.drop();
      removeStateDir(runnerDir);
      removeStateDir(dataDir);
      removeStateDir(keyDir);
      uids.release();
    });
    const v1 = join(keyDir, 'v1.pem');
    keyFile(v1);
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      DATABASE_URL: db.url,
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
      LOG_LEVEL: 'warn',
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_SWEEP_INTERVAL_MS: '100',
      CAPSULE_SIGNING_AUTHORITY_ID: AUTHORITY,
      CAPSULE_SIGNING_KEY_FILES: `1:${v1}`,
      CAPSULE_RUNNER_UID_BASE: String(uids.base),
      CAPSULE_RUNNER_UID_COUNT: String(uids.count),
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-cptest-${randomBytes(6).toString('hex')}`,
    };

    const first = await serveProcess(env, dataDir);
    const u = await first.api.signup();
    const c = (await first.api.req('POST', '/v1/capsules', { key: u.key, json: {} })).body;
    await first.api.req('POST', `/v1/capsules/${c.id}/upload?filename=a.txt`, { key: u.key, raw: 'data' });
    // The key stops parsing: phase 1 only.
    writeFileSync(v1, 'not a key\n');
    const refused = await first.api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key });
    t.equal(envelope(t, refused, 503, 'service_unavailable').degradation_mode, 'signing_key_unavailable');
    const wiped = (await first.api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body;
    t.equal(wiped.status, 'destroyed');
    first.child.kill('SIGKILL');
    await exited(first.child);

    // The key is back (a new file for version 1) and serve restarts on the same data.
    const pub = keyFile(v1);
    const second = await serveProcess(env, dataDir);
    t.teardown(async () => {
      second.child.kill('SIGTERM');
      await exited(second.child);
    });
    let proof = await second.api.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
    for (let i = 0; i < 100 && proof.status !== 200; i++) {
      await new Promise((r) => setTimeout(r, 100));
      proof = await second.api.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
    }
    t.equal(proof.status, 200, `the buffered proof was signed after the restart: ${proof.text.slice(0, 200)}`);
    t.equal(proof.body.cdp.attestation.public_key, `base64:${pub}`);
    t.equal(proof.body.cdp.destroyed_at, wiped.destroyed_at, 'the content fixed at the wipe');
    t.equal(proof.body.verified, true);
    const again = await second.api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key });
    t.equal(again.status, 200, 'the repeated DELETE gets the stored response');
    t.strictSame(again.body.cdp, proof.body.cdp);

    // Offline: the CLI resolves the proof against the manifest the install publishes.
    const manifest = join(keyDir, 'manifest.json');
    writeFileSync(manifest, (await second.api.req('GET', '/v1/trust-manifest')).text);
    const proofFile = join(keyDir, 'proof.json');
    writeFileSync(proofFile, JSON.stringify(proof.body.cdp));
    const cli = spawnSync(process.execPath, [CLI, 'verify', '--json', '--trust-manifest', manifest, proofFile], {
      encoding: 'utf8',
    });
    t.equal(cli.status, 0, cli.stderr);
    const line = JSON.parse(cli.stdout.trim().split('\n')[0]!);
    t.equal(line.valid, true);
    t.equal(line.signing_authority_id, AUTHORITY);
    t.equal(line.key_resolved, true);
  });
}
