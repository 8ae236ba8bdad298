// The event catalog end to end with the real sandbox runner, on SQLite and
// PostgreSQL: a new user registers a receiver, destroys a capsule and gets a
// verified cdp.generated within a second; capsule.created/destroyed/expired,
// capsulefile.finalized, quota.threshold at 80 % and 100 %, and
// capsule.failed (expired_unclean after the runner lost its state).
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyProof } from '../../shared/proof/index.js';
import { removeStateDir, startRunner } from '../helpers/runner.js';
import { DRIVERS, freshDb, start, testMasterKeyFile } from '../control-plane/harness.js';
import { startReceiver } from './receiver.js';

for (const driver of DRIVERS) {
  t.test(`${driver}: webhook events from real state changes`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const dir = mkdtempSync(join(tmpdir(), 'wh-tiers-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    // A plan with a 5-capsule month, so 80 % and 100 % are reached in a test.
    const tiers = join(dir, 'tiers.yaml');
    const row = (n: number): string =>
      `  capsules_per_month: ${n}\n  max_ttl_seconds: 3600\n  concurrent_capsules: 10\n  rate_limit_rpm: 1000\n  upload_max_bytes: 33554432\n`;
    writeFileSync(tiers, `starter:\n${row(5)}business:\n${row(1000)}enterprise:\n${row(1000)}`);
    const env = {
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
      CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile,
      CAPSULE_SWEEP_INTERVAL_MS: '100',
      CAPSULE_TIERS_FILE: tiers,
      // One operator master key across the restart below: the sealed signing secret must still open.
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dir),
    };
    const db = await freshDb(driver);
    t.teardown(() => db.drop());
    let runner = await startRunner();
    t.teardown(() => runner.stop());
    let s = await start(driver, runner.client, env, db);
    t.teardown(() => s.close());
    const api = () => s.api;
    const u = await api().signup();
    const hook = await api().req('POST', '/v1/webhooks', {
      key: u.key,
      json: {
        url: `${rx.base}/all`,
        events: [
          'cdp.generated',
          'capsule.created',
          'capsule.destroyed',
          'capsule.expired',
          'capsule.failed',
          'capsulefile.finalized',
          'quota.threshold',
        ],
      },
    });
    t.equal(hook.status, 201, hook.text);
    rx.secrets.set('/all', hook.body.signing_secret);
    const of = (type: string, capsuleId?: string) =>
      rx.received.filter(
        (r) => r.path === '/all' && r.body?.type === type && (!capsuleId || r.body.data.capsule_id === capsuleId),
      );

    await t.test('destroy -> verified cdp.generated within a second', async (t) => {
      const c = await api().req('POST', '/v1/capsules', { key: u.key, json: {} });
      t.equal(c.status, 201, c.text);
      const id = c.body.id;
      await rx.waitFor(() => of('capsule.created', id).length === 1, 5000);
      const created = of('capsule.created', id)[0]!;
      t.equal(created.verified, true);
      t.equal(created.body.data.expires_at, c.body.expires_at);
      t.equal(created.body.data.status, 'active');
      const started = Date.now();
      const d = await api().req('DELETE', `/v1/capsules/${id}`, { key: u.key });
      t.equal(d.status, 200, d.text.slice(0, 300));
      await rx.waitFor(() => of('cdp.generated', id).length === 1, 5000);
      const got = of('cdp.generated', id)[0]!;
      const latency = got.at - started;
      t.ok(latency < 1000, `cdp.generated ${latency} ms after the destroy request began`);
      t.equal(got.verified, true, 'signature verifies from the contract');
      const data = got.body.data;
      const proof = await api().req('GET', `/v1/proofs/${id}`, { key: u.key });
      t.equal(data.capsule_id, id);
      t.equal(data.proof_id, proof.body.proof_id);
      t.equal(data.cdp_version, d.body.cdp.cdp_version);
      t.equal(data.completeness, 'complete');
      t.equal(data.canonical_hash, d.body.cdp.canonical_hash);
      t.equal(data.final_hash, d.body.cdp.final_hash);
      t.same(data.termination, { trigger: 'customer_request' });
      t.equal(data.verify_url, `${s.cp.url}/v1/capsules/${id}/cdp/verify`);
      const v = await fetch(data.verify_url);
      t.equal(v.status, 200, 'the public verify URL answers');
      t.equal((await verifyProof(d.body.cdp)).valid, true);
      await rx.waitFor(() => of('capsule.destroyed', id).length === 1, 5000);
      const destroyed = of('capsule.destroyed', id)[0]!.body.data;
      t.equal(destroyed.status, 'destroyed');
      t.equal(destroyed.proof_id, data.proof_id);
      t.equal(destroyed.destroyed_at, d.body.destroyed_at);
    });

    await t.test('TTL expiry sends capsule.expired and cdp.generated with trigger ttl_expired', async (t) => {
      const c = await api().req('POST', '/v1/capsules', { key: u.key, json: { ttl: 1 } });
      t.equal(c.status, 201, c.text);
      await rx.waitFor(() => of('capsule.expired', c.body.id).length === 1, 15_000);
      t.equal(of('capsule.expired', c.body.id)[0]!.body.data.status, 'expired');
      await rx.waitFor(() => of('cdp.generated', c.body.id).length === 1, 5000);
      t.same(of('cdp.generated', c.body.id)[0]!.body.data.termination, { trigger: 'ttl_expired' });
    });

    await t.test('capsulefile.finalized carries the content hash', async (t) => {
      const cf = await api().req('POST', '/v1/capsulefiles', {
        key: u.key,
        json: { name: 'wh-test', runtime: 'python3', entrypoint: 'python3 /capsule/app/main.py' },
      });
      t.equal(cf.status, 201, cf.text);
      await api().req('POST', `/v1/capsulefiles/${cf.body.id}/files?filename=main.py`, {
        key: u.key,
        raw: 'print(1)\n',
        headers: { 'content-type': 'application/octet-stream' },
      });
      const fin = await api().req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: u.key });
      t.equal(fin.status, 200, fin.text);
      await rx.waitFor(
        () =>
          rx.received.some(
            (r) => r.body?.type === 'capsulefile.finalized' && r.body.data.capsulefile_id === cf.body.id,
          ),
        5000,
      );
      const ev = rx.received.find((r) => r.body?.type === 'capsulefile.finalized')!;
      t.equal(ev.body.data.content_hash, fin.body.content_hash);
      t.equal(ev.body.data.file_count, 1);
      t.equal(ev.verified, true);
    });

    await t.test('quota.threshold at 80 % and 100 % of the month', async (t) => {
      const v = await api().signup();
      const w = await api().req('POST', '/v1/webhooks', {
        key: v.key,
        json: { url: `${rx.base}/quota`, events: ['quota.threshold'] },
      });
      t.equal(w.status, 201);
      t.ok(await s.cp.store.setTierByEmail(v.email, 'starter'));
      for (let i = 1; i <= 5; i++) {
        const c = await api().req('POST', '/v1/capsules', { key: v.key, json: {} });
        t.equal(c.status, 201, c.text);
        await api().req('DELETE', `/v1/capsules/${c.body.id}`, { key: v.key });
        if (i === 3) {
          await new Promise((r) => setTimeout(r, 300));
          t.equal(rx.received.filter((r) => r.path === '/quota').length, 0, 'nothing below 80 %');
        }
      }
      await rx.waitFor((r) => r.filter((x) => x.path === '/quota').length === 2, 5000);
      const q = rx.received.filter((r) => r.path === '/quota').map((r) => r.body.data);
      q.sort((a, b) => a.threshold_percent - b.threshold_percent);
      t.same(
        q.map((x) => [x.quota, x.threshold_percent, x.used, x.limit]),
        [
          ['capsules_per_month', 80, 4, 5],
          ['capsules_per_month', 100, 5, 5],
        ],
      );
      const sixth = await api().req('POST', '/v1/capsules', { key: v.key, json: {} });
      t.equal(sixth.status, 402, 'the quota itself still holds');
    });

    await t.test('capsule.failed when the runner lost the capsule (expired_unclean, partial proof)', async (t) => {
      const c = await api().req('POST', '/v1/capsules', { key: u.key, json: {} });
      t.equal(c.status, 201, c.text);
      const id = c.body.id;
      await s.close();
      // The runner dies with the capsule; restarted on its state it reports the capsule lost.
      await runner.kill();
      const first = runner;
      runner = await startRunner({ stateDir: first.stateDir, uidBlock: first.uidBlock });
      t.teardown(() => {
        removeStateDir(first.stateDir);
        first.uidBlock.release();
      });
      s = await start(driver, runner.client, env, db);
      await rx.waitFor(() => of('capsule.failed', id).length === 1, 10_000);
      const failed = of('capsule.failed', id)[0]!;
      t.equal(failed.verified, true);
      t.equal(failed.body.data.status, 'expired_unclean');
      t.equal(failed.body.data.reason, 'capsule_state_lost_on_restart');
      await rx.waitFor(() => of('cdp.generated', id).length === 1, 5000);
      const cdp = of('cdp.generated', id)[0]!.body.data;
      t.equal(cdp.completeness, 'partial');
      t.equal(cdp.proof_id, failed.body.data.proof_id);
      t.same(cdp.termination, { trigger: 'system_restart' });
    });
  });
}
