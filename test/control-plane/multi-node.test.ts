// Many nodes on this machine: PostgreSQL, two `capsule serve` replicas and
// three runners, each runner on its own test host (network namespace, veth,
// its own address) reached over mutual TLS, so traffic crosses interfaces.
// 100 capsules go through both replicas (placed on every runner, each call
// routed to its runner from either replica, proofs verify); a fourth runner
// whose certificate another CA issued is never used; kill -9 of one runner
// ends its capsules expired_unclean with partial proofs while the rest finish;
// a drained runner gets no new capsule; kill -9 of a replica mid-create: the
// retry with the same Idempotency-Key on the other replica succeeds and the
// account holds exactly one capsule for it.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { verifyProof } from '../../shared/proof/index.js';
import { startCluster } from '../helpers/cluster.js';
import { dbQuery, type Api } from './harness.js';

const CLI = new URL('../../cli/capsule.js', import.meta.url).pathname;

/** Runs `items` through `f` with at most `n` at once. */
async function pool<T, R>(items: T[], n: number, f: (x: T, i: number) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (next < items.length) {
        const i = next++;
        out[i] = await f(items[i]!, i);
      }
    }),
  );
  return out;
}

async function until<T>(what: string, f: () => Promise<T | null | undefined | false>, ms = 30_000): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

t.test('two replicas, three runners on their own hosts', async (t) => {
  // The fourth runner's certificate is from another CA: listed in CAPSULE_RUNNERS, never trusted.
  const cl = await startCluster({
    runners: 3,
    replicas: 2,
    rogue: true,
    env: { CAPSULE_SWEEP_INTERVAL_MS: '300', CAPSULE_RUNNER_HEARTBEAT_MS: '300', CAPSULE_RUNNER_LOST_AFTER_MS: '2000' },
  });
  t.teardown(() => cl.close());
  const { db, direct, runners, replicas, env } = cl;
  const api = (i: number): Api => cl.api(i);
  for (const i of [0, 1]) t.equal((await api(i).req('GET', '/v1/health/ready')).status, 200, `replica ${i} ready`);

  const u = await api(0).signup();
  await dbQuery('postgresql', db, `update "accounts" set "tier" = 'enterprise' where "customer_id" = ?`, [
    u.customer_id,
  ]);
  const registry = async (): Promise<{ node_id: string; lost_at: unknown; draining: unknown }[]> =>
    dbQuery('postgresql', db, 'select "node_id", "lost_at", "draining" from "runner_nodes" order by "node_id"');
  t.same(
    (await registry()).map((r) => r.node_id),
    ['node-0', 'node-1', 'node-2'],
    'three runners registered; the one from another CA never answered a hello',
  );

  // 100 capsules, created alternately through both replicas, each exec'd through the other one.
  const made = await pool(
    Array.from({ length: 100 }, (_, i) => i),
    8,
    async (i) => {
      const c = await api(i % 2).req('POST', '/v1/capsules', { key: u.key, json: { metadata: { n: String(i) } } });
      if (c.status !== 201) throw new Error(`create ${i}: ${c.status} ${c.text}`);
      const ex = await api((i + 1) % 2).req('POST', `/v1/capsules/${c.body.id}/exec`, {
        key: u.key,
        json: { command: `echo n${i}` },
      });
      if (ex.body?.stdout !== `n${i}\n`) throw new Error(`exec ${i}: ${ex.status} ${ex.text}`);
      return c.body.id as string;
    },
  );
  t.equal(new Set(made).size, 100, '100 capsules created and run through both replicas');
  const held = await Promise.all(direct.map((c) => c.list()));
  t.same(
    held.map((l) => l.filter((id) => made.includes(id)).length).reduce((a, b) => a + b),
    100,
    'every capsule lives on exactly one runner',
  );
  const counts = held.map((l) => l.length);
  t.ok(
    Math.max(...counts) <= 1.5 * Math.min(...counts) + 2,
    `placement spreads the capsules over the runners (${counts.join(' / ')})`,
  );
  const placed = await dbQuery('postgresql', db, 'select count(*) as n from "capsule_placements"');
  t.equal(Number(placed[0].n), 100, 'each placement recorded once');

  // kill -9 of node-1: its capsules end expired_unclean with partial proofs, the others finish.
  const onLost = new Set(held[1]!.filter((id) => made.includes(id)));
  t.ok(onLost.size > 0, `node-1 holds ${onLost.size} capsules`);
  await direct[1]!.close();
  await runners[1]!.kill();
  const lostIds = [...onLost];
  await until('the lost runner capsules to end expired_unclean', async () => {
    const st = await Promise.all(lostIds.map((id) => api(0).req('GET', `/v1/capsules/${id}`, { key: u.key })));
    return st.every((s) => s.body.status === 'expired_unclean');
  });
  t.pass(`all ${lostIds.length} capsules of the lost runner are expired_unclean`);
  const lostRows = (await registry()).filter((r) => r.lost_at !== null).map((r) => r.node_id);
  t.same(lostRows, ['node-1'], 'node-1 declared lost');
  for (const id of lostIds.slice(0, 5)) {
    const pr = await api(1).req('GET', `/v1/proofs/${id}`, { key: u.key });
    t.equal(pr.status, 200);
    t.equal(pr.body.cdp.completeness, 'partial');
    t.equal(pr.body.cdp.reason, 'capsule_runner_lost');
  }
  const partials = await dbQuery(
    'postgresql',
    db,
    `select count(*) as n from "proofs" where "partial" = 1 and "capsule_id" in (${lostIds.map(() => '?').join(',')})`,
    lostIds,
  );
  t.equal(Number(partials[0].n), lostIds.length, 'one partial proof per capsule of the lost runner, never two');

  const survivors = made.filter((id) => !onLost.has(id));
  const destroyed = await pool(survivors, 8, async (id, i) => {
    const d = await api(i % 2).req('DELETE', `/v1/capsules/${id}`, { key: u.key });
    if (d.status !== 200) throw new Error(`destroy ${id}: ${d.status} ${d.text}`);
    return verifyProof(d.body.cdp).valid;
  });
  t.ok(
    destroyed.every(Boolean),
    `the other ${survivors.length} capsules destroyed through both replicas, proofs verify`,
  );

  // Draining node-0: new capsules go to node-2 only.
  const drain = spawnSync(process.execPath, [CLI, 'admin', 'drain', 'node-0'], { env, encoding: 'utf8' });
  t.equal(drain.status, 0, drain.stderr);
  await new Promise((r) => setTimeout(r, 800)); // both replicas re-read the registry
  const fresh = await pool([0, 1, 2, 3], 2, async (i) => {
    const c = await api(i % 2).req('POST', '/v1/capsules', { key: u.key, json: {} });
    t.equal(c.status, 201, c.text);
    return c.body.id as string;
  });
  const on2 = await direct[2]!.list();
  t.ok(
    fresh.every((id) => on2.includes(id)),
    'a drained runner gets no new capsule',
  );
  for (const id of fresh) await api(0).req('DELETE', `/v1/capsules/${id}`, { key: u.key });

  // kill -9 of a replica mid-create: the retry on the other one succeeds, one capsule exists.
  for (const [round, delay] of [5, 25, 60].entries()) {
    const victim = round % 2;
    const other = 1 - victim;
    const key = `retry-${round}-${Date.now()}`;
    const body = { metadata: { round: String(round) } };
    const inflight = api(victim)
      .req('POST', '/v1/capsules', { key: u.key, json: body, headers: { 'idempotency-key': key } })
      .catch(() => null);
    await new Promise((r) => setTimeout(r, delay));
    replicas[victim]!.child.kill('SIGKILL');
    await new Promise((r) => replicas[victim]!.child.once('exit', r));
    await inflight;
    const retry = await api(other).req('POST', '/v1/capsules', {
      key: u.key,
      json: body,
      headers: { 'idempotency-key': key },
    });
    t.equal(retry.status, 201, `round ${round}: the retry succeeds on the other replica (${retry.text.slice(0, 120)})`);
    const mine = await dbQuery(
      'postgresql',
      db,
      `select "id" from "capsules" where "customer_id" = ? and "metadata" like ?`,
      [u.customer_id, `%"round":"${round}"%`],
    );
    t.same(
      mine.map((r) => r.id),
      [retry.body.id],
      `round ${round} (kill after ${delay} ms): exactly one capsule, the one the retry names`,
    );
    const again = await api(other).req('POST', '/v1/capsules', {
      key: u.key,
      json: body,
      headers: { 'idempotency-key': key },
    });
    t.equal(again.body.id, retry.body.id, `round ${round}: a further retry replays it`);
    await api(other).req('DELETE', `/v1/capsules/${retry.body.id}`, { key: u.key });
    await cl.serve(victim);
  }
});
