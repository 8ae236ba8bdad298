// `npm run bench:usage`: GET /v1/usage/items.csv over HTTP on loopback for an
// account holding 1,000,000 usage items, on SQLite and PostgreSQL; beside it,
// in the same run, the baseline: a bare SELECT of the same rows streamed
// through the driver to /dev/null. Prints rows per second of both, their
// ratio, and the peak RSS growth of each. Figures are printed, never asserted.
//   flags: --rows=1000000 --drivers=sqlite,postgresql --runs=2
import { createWriteStream } from 'node:fs';
import http from 'node:http';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { performance } from 'node:perf_hooks';
import { once } from 'node:events';
import { pino } from 'pino';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { startControlPlane } from '../control-plane/server.js';
import { openOrm } from '../control-plane/store/orm.js';
import { RunnerClient } from '../shared/node/runner-client.js';
import { Api, freshDb, testConfig, type Driver } from '../test/control-plane/harness.js';

const argNum = (name: string, dflt: number): number => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.slice(name.length + 3)) : dflt;
};
const ROWS = argNum('rows', 1_000_000);
const RUNS = argNum('runs', 2);
const driversArg = process.argv.find((x) => x.startsWith('--drivers='));
const DRIVERS = (driversArg ? driversArg.slice(10).split(',') : ['sqlite', 'postgresql']) as Driver[];
// The export needs no runner: a client on a socket nobody serves.
const noRunner = new RunnerClient(join(tmpdir(), `bench-usage-no-runner-${process.pid}.sock`));

/** Inserts `n` items for one customer in the database itself (a generated series). */
function seedSql(driver: Driver, n: number): string {
  const cols = '"id", "customer_id", "kind", "capsule_id", "quantity", "billable", "created_at"';
  // Ten items per second from 2030-03-05, kinds and capsules cycling, one in five from a test key.
  if (driver === 'sqlite')
    return `with recursive seq(i) as (select 0 union all select i + 1 from seq where i < ${n - 1})
      insert into "usage_items" (${cols}) select
        'usg_' || printf('%024x', i), ?, case i % 4 when 0 then 'capsule' when 1 then 'exec' when 2 then 'proof' else 'egress_request' end,
        'cap_' || printf('%024x', i / 4), case i % 4 when 1 then 1000 + i % 997 else 1 end, case when i % 5 = 0 then 0 else 1 end,
        strftime('%Y-%m-%dT%H:%M:%S', 1899590400 + i / 10, 'unixepoch') || '.' || printf('%06d', (i % 10) * 100000) || 'Z'
      from seq`;
  return `insert into "usage_items" (${cols}) select
      'usg_' || lpad(to_hex(i), 24, '0'), ?, (array['capsule','exec','proof','egress_request'])[i % 4 + 1],
      'cap_' || lpad(to_hex(i / 4), 24, '0'), case i % 4 when 1 then 1000 + i % 997 else 1 end, case when i % 5 = 0 then 0 else 1 end,
      to_char(to_timestamp(1899590400 + i / 10) at time zone 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS') || '.' || lpad(((i % 10) * 100000)::text, 6, '0') || 'Z'
    from generate_series(0, ${n - 1}) as i`;
}

/**
 * Runs `f`: wall seconds, this process's CPU seconds (the machine is shared:
 * CPU time shows what the work costs when wall time is stretched by others),
 * and the peak RSS growth over the start, sampled every 20 ms.
 */
async function measure<T>(f: () => Promise<T>): Promise<{ value: T; wallS: number; cpuS: number; peakMb: number }> {
  global.gc?.();
  const base = process.memoryUsage.rss();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  let peak = base;
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage.rss());
  }, 20);
  try {
    const value = await f();
    const wallS = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    peak = Math.max(peak, process.memoryUsage.rss());
    return { value, wallS, cpuS: (cpu.user + cpu.system) / 1e6, peakMb: (peak - base) / 2 ** 20 };
  } finally {
    clearInterval(timer);
  }
}

/** The baseline: the same rows, same order, one streamed SELECT, each row written as a line to /dev/null. */
async function bareSelect(em: SqlEntityManager, customerId: string): Promise<number> {
  const out = createWriteStream('/dev/null');
  let n = 0;
  const stream = em.getConnection().stream<Record<string, unknown>>(
    'select "id", "created_at", "kind", "capsule_id", "quantity", "billable" from "usage_items" where "customer_id" = ? order by "created_at", "id"',
    [customerId],
    undefined,
    undefined,
    5000, // rows per fetch (PostgreSQL cursor), as the export's batches
  );
  for await (const row of stream) {
    n++;
    if (!out.write(`${row.id},${row.created_at},${row.kind},${row.capsule_id},${row.quantity},${row.billable}\n`))
      await once(out, 'drain');
  }
  out.end();
  await once(out, 'finish');
  return n;
}

/** GET items.csv, reading and discarding the body; the number of records (lines less the header). */
function csvExport(url: string, key: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = http.get(`${url}/v1/usage/items.csv`, { headers: { authorization: `Bearer ${key}` } }, (res) => {
      if (res.statusCode !== 200) return reject(new Error(`items.csv: ${res.statusCode}`));
      let lines = 0;
      res.on('data', (c: Buffer) => {
        for (let i = c.indexOf(10); i !== -1; i = c.indexOf(10, i + 1)) lines++;
      });
      res.on('end', () => resolve(lines - 1));
      res.on('error', reject);
    });
    req.on('error', reject);
  });
}

async function benchDriver(driver: Driver): Promise<void> {
  const db = await freshDb(driver);
  const config = testConfig(db.url, { CAPSULE_RATE_LIMITS: 'off' });
  const cp = await startControlPlane(config, noRunner, { logger: pino({ level: 'silent' }) });
  const orm = await openOrm(config.database);
  try {
    const api = new Api(cp.url);
    const { key, customer_id } = await api.signup();
    const em = orm.em.fork() as SqlEntityManager;
    const t0 = performance.now();
    await em.getConnection().execute(seedSql(driver, ROWS), [customer_id], 'run');
    if (driver === 'postgresql') await em.getConnection().execute('analyze "usage_items"', [], 'run');
    console.log(`${driver}: seeded ${ROWS} usage items in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const rate = (secs: number): string => `${Math.round(ROWS / secs).toLocaleString('en')} rows/s`;
    for (let run = 1; run <= RUNS; run++) {
      const bare = await measure(() => bareSelect(em, customer_id));
      const csv = await measure(() => csvExport(cp.url, key));
      if (bare.value !== ROWS || csv.value !== ROWS)
        throw new Error(`row counts: bare ${bare.value}, csv ${csv.value}, expected ${ROWS}`);
      console.log(
        `${driver} run ${run}: bare SELECT -> /dev/null ${rate(bare.wallS)} (cpu ${rate(bare.cpuS)}, RSS +${bare.peakMb.toFixed(1)} MB)` +
          ` | items.csv over HTTP ${rate(csv.wallS)} (cpu ${rate(csv.cpuS)}, RSS +${csv.peakMb.toFixed(1)} MB)` +
          ` | ratio ${(bare.wallS / csv.wallS).toFixed(2)}x wall, ${(bare.cpuS / csv.cpuS).toFixed(2)}x cpu`,
      );
    }
  } finally {
    await orm.close(true);
    await cp.close();
    await db.drop();
  }
}

for (const d of DRIVERS) await benchDriver(d);
