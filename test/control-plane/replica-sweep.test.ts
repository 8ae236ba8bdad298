// Two control planes on one PostgreSQL database and one runner (two replicas
// of an install): when capsules expire, both sweepers run, and each capsule
// is destroyed exactly once with its full proof (status `expired`), never
// raced into a partial one; the holder's clean stop hands the sweep over.
import t from 'tap';
import { verifyProof } from '../../shared/proof/index.js';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';
import { freshDb, start } from './harness.js';
import { ManualClock } from '../helpers/clock.js';

/** The runner as one replica sees it, counting its destroy calls. */
function counting(r: RunnerPort): { port: RunnerPort; destroys: () => number } {
  let n = 0;
  const port = new Proxy(r, {
    get(target, k) {
      const v = Reflect.get(target, k, target) as unknown;
      if (k === 'destroy')
        return (...a: Parameters<RunnerPort['destroy']>) => {
          n++;
          return target.destroy(...a);
        };
      return typeof v === 'function' ? (v as (...x: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { port, destroys: () => n };
}

t.test('postgresql: two replicas sweep each expired capsule once', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const db = await freshDb('postgresql');
  t.teardown(() => db.drop());
  const clock = new ManualClock();
  // Sweeps are driven by hand (the interval timer is an hour away).
  const env = { CAPSULE_RATE_LIMITS: 'off', CAPSULE_SWEEP_INTERVAL_MS: '3600000' };
  const ra = counting(runner.client);
  const rb = counting(runner.client);
  const a = await start('postgresql', ra.port, env, db, { clock });
  const b = await start('postgresql', rb.port, env, db, { clock });
  t.teardown(() => b.close());
  const u = await a.api.signup();
  const ids: string[] = [];
  for (let i = 0; i < 3; i++) {
    const c = await (i % 2 ? b : a).api.req('POST', '/v1/capsules', { key: u.key, json: { ttl: 60 } });
    t.equal(c.status, 201, c.text);
    ids.push(c.body.id);
  }
  clock.advance(61_000);
  await Promise.all([a.cp.services.sweeper.sweep(), b.cp.services.sweeper.sweep()]);
  for (const id of ids) {
    const g = await b.api.req('GET', `/v1/capsules/${id}`, { key: u.key });
    t.equal(g.body.status, 'expired', `${id}: expired by one sweeper, not raced into expired_unclean`);
    const p = await a.api.req('GET', `/v1/proofs/${id}`, { key: u.key });
    t.equal(p.status, 200);
    t.equal(p.body.cdp.completeness ?? 'complete', 'complete');
    t.ok(verifyProof(p.body.cdp).valid);
  }
  t.same(await runner.client.list(), [], 'nothing left on the runner');
  t.equal(
    ra.destroys() + rb.destroys(),
    ids.length,
    'one runner destroy per capsule: one sweeper swept, the other waited',
  );

  // The holder stops cleanly: the other takes the sweep over at its next pass.
  const c = await b.api.req('POST', '/v1/capsules', { key: u.key, json: { ttl: 60 } });
  await a.close();
  clock.advance(61_000);
  await b.cp.services.sweeper.sweep();
  t.equal((await b.api.req('GET', `/v1/capsules/${c.body.id}`, { key: u.key })).body.status, 'expired');
});
