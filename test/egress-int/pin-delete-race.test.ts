// DELETE of a Capsulefile or an egress profile racing a capsule create that
// pins it, many times on SQLite and PostgreSQL with the real runner. Two rounds
// in three send the DELETE while the runner is creating the sandbox or just
// after (the window where the capsule row did not exist yet); the third sends
// it 0-200 ms after the create. Whatever the order, the outcome is one of two:
// the create won (201, DELETE 409, the Capsulefile/profile still there) or the
// delete won (204, create 404 naming the field, no capsule row, the runner
// holds no sandbox, the slot is back). Also: a runner reconciliation run
// while a create is in flight leaves that create's sandbox alone.
import t from 'tap';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import { DRIVERS, envelope, start, type Api, type Started, type T } from '../control-plane/harness.js';
import { startRunner } from '../helpers/runner.js';

const ROUNDS = 15;

type Hooks = { before?: (() => void) | undefined; after?: (() => void | Promise<void>) | undefined };

/** The real runner, with hooks before and after every create and a short pause before it. */
function pausingRunner(inner: RunnerPort): { port: RunnerPort; onCreate: (h: Hooks) => void } {
  const hooks: Hooks = {};
  const port = new Proxy(inner, {
    get(target, p) {
      if (p === 'create') {
        return async (req: Parameters<RunnerPort['create']>[0]) => {
          hooks.before?.();
          await new Promise((r) => setTimeout(r, 30));
          const out = await target.create(req);
          await hooks.after?.();
          return out;
        };
      }
      const v = Reflect.get(target, p, target) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return {
    port,
    onCreate: (h) => {
      hooks.before = h.before;
      hooks.after = h.after;
    },
  };
}

async function race(
  t: T,
  s: Started,
  api: Api,
  key: string,
  customerId: string,
  runner: RunnerPort,
  onCreate: (h: Hooks) => void,
  kind: 'capsulefile' | 'egress_profile',
  makeTarget: () => Promise<{ id: string; capsuleJson: Record<string, unknown>; deletePath: string; getPath: string }>,
): Promise<{ createWon: number; deleteWon: number }> {
  let createWon = 0;
  let deleteWon = 0;
  for (let i = 0; i < ROUNDS; i++) {
    const target = await makeTarget();
    const mode = i % 3;
    let del: Promise<Awaited<ReturnType<Api['req']>>>;
    let create: Promise<Awaited<ReturnType<Api['req']>>>;
    if (mode < 2) {
      // DELETE lands while the runner creates the sandbox (0) or just after it did, before the row (1).
      let fired!: Promise<Awaited<ReturnType<Api['req']>>>;
      const called = new Promise<void>((resolve) => {
        const fire = (): void => {
          fired = api.req('DELETE', target.deletePath, { key });
          resolve();
        };
        onCreate(mode === 0 ? { before: fire } : { after: fire });
      });
      create = api.req('POST', '/v1/capsules', { key, json: target.capsuleJson });
      await called;
      onCreate({});
      del = fired;
    } else {
      // Free-running: the DELETE follows the create by 0-200 ms.
      create = api.req('POST', '/v1/capsules', { key, json: target.capsuleJson });
      await new Promise((r) => setTimeout(r, Math.floor(Math.random() * 200)));
      del = api.req('DELETE', target.deletePath, { key });
    }
    const [c, d] = await Promise.all([create, del]);
    if (c.status === 201) {
      createWon++;
      envelope(t, d, 409, 'resource_conflict');
      t.equal((await api.req('GET', target.getPath, { key })).status, 200, `${kind} kept while a capsule pins it`);
      t.equal((await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key })).status, 200);
      t.equal((await api.req('DELETE', target.deletePath, { key })).status, 204, 'deletable once the capsule is gone');
    } else {
      deleteWon++;
      t.equal(d.status, 204, `delete won: ${d.text}`);
      t.match(envelope(t, c, 404, 'resource_not_found').message, new RegExp(`^${kind}_id: `));
      t.equal((await api.req('GET', target.getPath, { key })).status, 404);
    }
    // Either way: no live capsule pins a deleted row, the runner holds no stray sandbox, the slot is back.
    const page = await s.cp.store.listCapsules(customerId, 100, null);
    const live = page.items.filter((x) => x.status === 'active' || x.status === 'executing');
    t.equal(live.length, 0, `round ${i}: no live capsule left`);
    t.same(await runner.list(), [], `round ${i}: the runner holds no sandbox`);
    t.equal((await s.cp.store.getAccount(customerId))?.live_capsules, 0, `round ${i}: the live slot is back`);
  }
  t.comment(`${kind}: create won ${createWon}, delete won ${deleteWon} of ${ROUNDS}`);
  return { createWon, deleteWon };
}

t.test('DELETE vs a create pinning the same row', async (t) => {
  const real = await startRunner();
  t.teardown(() => real.stop());
  const { port, onCreate } = pausingRunner(real.client);

  for (const driver of DRIVERS) {
    await t.test(driver, async (t) => {
      const s = await start(driver, port, { CAPSULE_RATE_LIMITS: 'off' });
      t.teardown(() => s.close());
      const api = s.api;
      const who = await api.signup();
      await s.cp.store.setTierByEmail(who.email, 'business');
      let n = 0;

      await t.test('Capsulefile', async (t) => {
        const r = await race(t, s, api, who.key, who.customer_id, real.client, onCreate, 'capsulefile', async () => {
          const cf = await api.req('POST', '/v1/capsulefiles', {
            key: who.key,
            json: { name: `race-${n++}`, runtime: 'sh', entrypoint: 'true' },
          });
          t.equal(cf.status, 201, cf.text);
          t.equal((await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: who.key })).status, 200);
          const id = cf.body.id as string;
          return {
            id,
            capsuleJson: { capsulefile_id: id },
            deletePath: `/v1/capsulefiles/${id}`,
            getPath: `/v1/capsulefiles/${id}`,
          };
        });
        t.ok(r.deleteWon > 0, `the delete won ${r.deleteWon} of ${ROUNDS} (the in-flight window was hit)`);
      });

      await t.test('runner reconciliation during a create leaves its sandbox alone', async (t) => {
        // The sandbox exists, its row not yet: a recovery pass (runner reconnect) must not destroy it as an orphan.
        onCreate({
          after: async () => {
            s.cp.services.recovery.reset();
            await s.cp.services.recovery.ensure();
          },
        });
        const c = await api.req('POST', '/v1/capsules', { key: who.key, json: {} });
        onCreate({});
        t.equal(c.status, 201, c.text);
        t.ok((await real.client.list()).includes(c.body.id), 'the runner still holds the new capsule');
        t.same(s.cp.services.recovery.report?.orphans_destroyed, [], 'no orphan destroyed');
        const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, {
          key: who.key,
          json: { command: 'echo alive' },
        });
        t.equal(ex.status, 200, ex.text);
        t.equal(ex.body.stdout, 'alive\n');
        t.equal((await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: who.key })).status, 200);
      });

      await t.test('egress profile', async (t) => {
        const r = await race(t, s, api, who.key, who.customer_id, real.client, onCreate, 'egress_profile', async () => {
          const p = await api.req('POST', '/v1/egress/profiles', { key: who.key, json: { name: `race-${n++}` } });
          t.equal(p.status, 201, p.text);
          const id = p.body.id as string;
          return {
            id,
            capsuleJson: { egress_profile_id: id },
            deletePath: `/v1/egress/profiles/${id}`,
            getPath: `/v1/egress/profiles/${id}`,
          };
        });
        t.ok(r.deleteWon > 0, `the delete won ${r.deleteWon} of ${ROUNDS} (the in-flight window was hit)`);
      });
    });
  }
});
