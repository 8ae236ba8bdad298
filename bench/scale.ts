// `npm run bench:scale`: the cost of distribution. For 1 and 2 control-plane
// replicas × 1 and 3 runners (each runner on its own network-namespace host
// over mutual TLS, PostgreSQL shared), capsule round trips per second
// (create -> exec `true` -> destroy, requests spread over the replicas),
// errors, and how evenly placement spread the capsules; then create latency
// p50/p99 with 100 capsules live on the 2 × 3 install. Every configuration
// goes through TLS and the namespaces, so the ratios isolate replicas and
// runners. Figures are printed, never asserted.
//   flags: --seconds=15 --concurrency=8
import { performance } from 'node:perf_hooks';
import { startCluster, type Cluster } from '../test/helpers/cluster.js';
import { dbQuery } from '../test/control-plane/harness.js';

const argNum = (name: string, dflt: number): number => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.slice(name.length + 3)) : dflt;
};
const SECONDS = argNum('seconds', 15);
const CONCURRENCY = argNum('concurrency', 8);

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}

async function enterpriseKey(cl: Cluster): Promise<string> {
  const u = await cl.api(0).signup();
  await dbQuery('postgresql', cl.db, `update "accounts" set "tier" = 'enterprise' where "customer_id" = ?`, [
    u.customer_id,
  ]);
  return u.key;
}

interface Figures {
  rate: number;
  errors: number;
  /** Mean capsules live per runner during the run (placements sampled every 100 ms). */
  placed: number[];
}

async function roundTrips(cl: Cluster, replicas: number, key: string): Promise<Figures> {
  let done = 0;
  let errors = 0;
  let turn = 0;
  const one = async (): Promise<void> => {
    const api = cl.api(turn++ % replicas);
    const c = await api.req('POST', '/v1/capsules', { key, json: {} });
    if (c.status !== 201) throw new Error(`create ${c.status}`);
    const ex = await cl
      .api(turn++ % replicas)
      .req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command: 'true' } });
    if (ex.status !== 200) throw new Error(`exec ${ex.status}`);
    const d = await cl.api(turn++ % replicas).req('DELETE', `/v1/capsules/${c.body.id}`, { key });
    if (d.status !== 200) throw new Error(`destroy ${d.status}`);
  };
  for (let i = 0; i < 4; i++) await one(); // warm-up
  const end = performance.now() + SECONDS * 1000;
  const t0 = performance.now();
  const live = new Map<string, number>();
  let samples = 0;
  const sampler = (async () => {
    while (performance.now() < end) {
      const rows = await dbQuery(
        'postgresql',
        cl.db,
        'select "node_id", count(*) as n from "capsule_placements" group by "node_id"',
      );
      for (const r of rows) live.set(r.node_id, (live.get(r.node_id) ?? 0) + Number(r.n));
      samples++;
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < end) {
        try {
          await one();
          done++;
        } catch (e) {
          errors++;
          if (errors <= 3) process.stderr.write(`  error: ${(e as Error).message}\n`);
        }
      }
    }),
  );
  const rate = done / ((performance.now() - t0) / 1000);
  await sampler;
  const nodes = [...live.keys()].sort();
  return { rate, errors, placed: nodes.map((n) => live.get(n)! / samples) };
}

async function createLatencyUnderLoad(cl: Cluster, key: string): Promise<number[]> {
  const live: string[] = [];
  for (let i = 0; i < 100; i++) {
    const c = await cl.api(i % 2).req('POST', '/v1/capsules', { key, json: {} });
    if (c.status !== 201) throw new Error(`create ${c.status} ${c.text}`);
    live.push(c.body.id);
  }
  const ms: number[] = [];
  for (let i = 0; i < 60; i++) {
    const t0 = performance.now();
    const c = await cl.api(i % 2).req('POST', '/v1/capsules', { key, json: {} });
    ms.push(performance.now() - t0);
    if (c.status !== 201) throw new Error(`create ${c.status}`);
    await cl.api(i % 2).req('DELETE', `/v1/capsules/${c.body.id}`, { key });
  }
  for (const id of live) await cl.api(0).req('DELETE', `/v1/capsules/${id}`, { key });
  return ms;
}

async function main(): Promise<void> {
  process.stdout.write(
    `bench:scale  ${SECONDS} s per configuration, ${CONCURRENCY} clients, round trip = create -> exec true -> destroy\n`,
  );
  const results = new Map<string, Figures>();
  for (const [replicas, runners] of [
    [1, 1],
    [1, 3],
    [2, 1],
    [2, 3],
  ] as const) {
    const cl = await startCluster({ runners, replicas });
    try {
      const key = await enterpriseKey(cl);
      const f = await roundTrips(cl, replicas, key);
      results.set(`${replicas}x${runners}`, f);
      const base = results.get('1x1')!.rate;
      const spread = f.placed.length > 1 ? (Math.max(...f.placed) / Math.min(...f.placed)).toFixed(2) : '-';
      process.stdout.write(
        `  ${replicas} replica(s) x ${runners} runner(s): ${f.rate.toFixed(1)} round trips/s  (${(f.rate / base).toFixed(2)}x of 1x1)  errors ${f.errors}  mean live per runner ${f.placed.map((x) => x.toFixed(2)).join('/')}  busiest/least ${spread}\n`,
      );
      if (replicas === 2 && runners === 3) {
        const ms = await createLatencyUnderLoad(cl, key);
        process.stdout.write(
          `  create with 100 capsules live (2x3): p50 ${pct(ms, 50).toFixed(1)} ms  p99 ${pct(ms, 99).toFixed(1)} ms  (n=${ms.length})\n`,
        );
      }
    } finally {
      await cl.close();
    }
  }
}

main().then(
  () => process.exit(0),
  (e: unknown) => {
    process.stderr.write(`bench:scale failed: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
