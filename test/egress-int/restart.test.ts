// A control plane restart ends the proxies it started: a capsule left on the
// runner has no way out afterwards (fail closed), and its proof says the
// proxy keys were not measured instead of claiming their destruction.
import t from 'tap';
import { pino } from 'pino';
import { verifyProof } from '../../shared/proof/index.js';
import { startControlPlane } from '../../control-plane/server.js';
import { Api, DRIVERS, freshDb, testConfig } from '../control-plane/harness.js';
import { startRunner } from '../helpers/runner.js';
import { fakeResolver, makePki, startUpstreams, tempDir } from '../egress/fixtures.js';

t.test('egress across a control plane restart', async (t) => {
  const pki = makePki(['api.test']);
  const up = await startUpstreams(pki);
  t.teardown(() => up.close());
  const dir = tempDir('egress-restart-');
  t.teardown(dir.remove);
  const env = { CAPSULE_RATE_LIMITS: 'off', CAPSULE_EGRESS_EXTRA_CA: dir.write('ca.pem', pki.caPem) };
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const egress = { resolver: fakeResolver({ 'api.test': '127.0.0.1' }) };
  const port = up.ports.https;

  for (const driver of DRIVERS) {
    await t.test(driver, async (t) => {
      const db = await freshDb(driver);
      t.teardown(() => db.drop());
      const config = testConfig(db.url, env);
      let cp = await startControlPlane(config, runner.client, { logger: pino({ level: 'silent' }), egress });
      let api = new Api(cp.url);
      const u = await api.signup();
      await cp.store.setTierByEmail(u.email, 'enterprise');
      const prof = await api.req('POST', '/v1/egress/profiles', { key: u.key, json: { name: 'r' } });
      for (const rule of [
        { kind: 'domain', value: 'api.test', port },
        { kind: 'ip_v4', value: '127.0.0.1', port },
      ]) {
        t.equal(
          (await api.req('POST', `/v1/egress/profiles/${prof.body.id}/rules`, { key: u.key, json: rule })).status,
          201,
        );
      }
      const cf = await api.req('POST', '/v1/capsulefiles', {
        key: u.key,
        json: { name: 'r', runtime: 'sh', entrypoint: 'true', egress_declaration: ['api.test', '127.0.0.1'] },
      });
      await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: u.key });
      const c = await api.req('POST', '/v1/capsules', {
        key: u.key,
        json: { capsulefile_id: cf.body.id, egress_profile_id: prof.body.id },
      });
      t.equal(c.status, 201, c.text);
      const cmd = { command: `curl -sS -m 10 https://api.test:${port}/json?n=1 || echo egress-failed`, timeout: 30 };
      const before = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key: u.key, json: cmd });
      t.match(before.body.stdout, /"n":1/, 'egress works before the restart');

      await cp.close();
      cp = await startControlPlane(config, runner.client, { logger: pino({ level: 'silent' }), egress });
      t.teardown(() => cp.close());
      api = new Api(cp.url);
      const after = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key: u.key, json: cmd });
      t.equal(after.status, 200, after.text);
      t.match(after.body.stdout, /egress-failed/, 'no proxy after the restart: fail closed');
      const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: u.key });
      t.equal(d.status, 200, d.text);
      t.equal(verifyProof(d.body.cdp).valid, true, 'AuditProof verified');
      t.match(
        d.body.cdp.evidence[3].egress_proxy,
        { state: 'not_running_in_this_process' },
        'step 4 says the proxy keys were not measured',
      );
      t.equal(
        d.body.cdp.activity.filter((e: { type: string }) => e.type === 'SealedHttpRequest').length,
        1,
        'the request before the restart is in the proof',
      );
    });
  }
});
