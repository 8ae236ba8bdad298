// `npm run bench:usage`: GET /v1/usage/items.csv over HTTP on loopback from a
// `capsule serve` process, for an account holding 1,000,000 usage items, on
// SQLite and PostgreSQL; beside it, in the same run, the baseline: a bare
// SELECT of the same rows streamed through the driver to /dev/null in this
// process. Prints rows per second of both (wall clock, and per CPU second of
// the process doing the work), their ratio, and the peak RSS growth of the
// server during the export. Figures are printed, never asserted.
//   flags: --rows=1000000 --drivers=sqlite,postgresql --runs=2
import { spawn } from 'node:child_process';
import { createWriteStream, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { createServer, type AddressInfo } from 'node:net';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { once } from 'node:events';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { openOrm } from '../control-plane/store/orm.js';
import { Api, freshDb, testMasterKeyFile, type Driver } from '../test/control-plane/harness.js';

const CLI = fileURLToPath(new URL('../cli/capsule.js', import.meta.url));

const argNum = (name: string, dflt: number): number => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.slice(name.length + 3)) : dflt;
};
const ROWS = argNum('rows', 1_000_000);
const RUNS = argNum('runs', 2);
const driversArg = process.argv.find((x) => x.startsWith('--drivers='));
const DRIVERS = (driversArg ? driversArg.slice(10).split(',') : ['sqlite', 'postgresql']) as Driver[];

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

interface Measured<T> {
  value: T;
  wallS: number;
  cpuS: number;
  peakMb: number;
}

/** Resident set size and CPU seconds (user + system) of a process, from /proc. */
function procStats(pid: number | 'self'): { rss: number; cpuS: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const rssKb = Number(/VmRSS:\s+(\d+)/.exec(status)?.[1] ?? NaN);
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  const ticks = Number(fields[11]) + Number(fields[12]); // utime, stime (fields 14 and 15 of stat(5))
  return { rss: rssKb * 1024, cpuS: ticks / 100 };
}

/**
 * Runs `f` while watching process `pid`: wall seconds, that process's CPU
 * seconds (the machine is shared: CPU time shows what the work costs when
 * others stretch wall time), and its peak RSS growth, sampled every 20 ms.
 */
async function measure<T>(pid: number | 'self', f: () => Promise<T>): Promise<Measured<T>> {
  global.gc?.();
  const start = procStats(pid);
  let peak = start.rss;
  const timer = setInterval(() => {
    peak = Math.max(peak, procStats(pid).rss);
  }, 20);
  const t0 = performance.now();
  try {
    const value = await f();
    const wallS = (performance.now() - t0) / 1000;
    const end = procStats(pid);
    peak = Math.max(peak, end.rss);
    return { value, wallS, cpuS: end.cpuS - start.cpuS, peakMb: (peak - start.rss) / 2 ** 20 };
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

async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', () => r()));
  const port = (srv.address() as AddressInfo).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

async function benchDriver(driver: Driver): Promise<void> {
  const db = await freshDb(driver);
  const dir = mkdtempSync(join(tmpdir(), 'bench-usage-'));
  const port = await freePort();
  // The server as an operator runs it; the export needs no runner (its socket is simply absent).
  const server = spawn(
    process.execPath,
    [
      ...(process.env.BENCH_SERVER_FLAGS ? process.env.BENCH_SERVER_FLAGS.split(' ') : []),
      CLI,
      'serve',
      '--port',
      String(port),
      '--data-dir',
      dir,
      '--runner-socket',
      join(dir, 'no-runner.sock'),
    ],
    {
      env: {
        ...process.env,
        DATABASE_URL: db.url,
        CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dir),
        CAPSULE_RATE_LIMITS: 'off',
        LOG_LEVEL: 'warn',
      },
      stdio: ['ignore', 'ignore', 'inherit'],
    },
  );
  const orm = await openOrm(
    driver === 'sqlite' ? { driver, file: db.url.slice('file:'.length) } : { driver, url: db.url },
  );
  try {
    const api = new Api(`http://127.0.0.1:${port}`);
    for (let i = 0; ; i++) {
      const up = await api.req('GET', '/v1/health').catch(() => null);
      if (up?.status === 200) break;
      if (i > 300) throw new Error('capsule serve did not start');
      await new Promise((r) => setTimeout(r, 100));
    }
    const { key, customer_id } = await api.signup();
    const em = orm.em.fork() as SqlEntityManager;
    const t0 = performance.now();
    await em.getConnection().execute(seedSql(driver, ROWS), [customer_id], 'run');
    if (driver === 'postgresql') await em.getConnection().execute('analyze "usage_items"', [], 'run');
    console.log(`${driver}: seeded ${ROWS} usage items in ${((performance.now() - t0) / 1000).toFixed(1)} s`);
    const rate = (secs: number): string => `${Math.round(ROWS / secs).toLocaleString('en')} rows/s`;
    for (let run = 1; run <= RUNS; run++) {
      const bare = await measure('self', () => bareSelect(em, customer_id));
      const csv = await measure(server.pid as number, () => csvExport(api.base, key));
      if (bare.value !== ROWS || csv.value !== ROWS)
        throw new Error(`row counts: bare ${bare.value}, csv ${csv.value}, expected ${ROWS}`);
      console.log(
        `${driver} run ${run}: bare SELECT -> /dev/null ${rate(bare.wallS)} (cpu ${rate(bare.cpuS)})` +
          ` | items.csv over HTTP ${rate(csv.wallS)} (server cpu ${rate(csv.cpuS)}, server RSS +${csv.peakMb.toFixed(1)} MB)` +
          ` | ratio ${(bare.wallS / csv.wallS).toFixed(2)}x wall, ${(bare.cpuS / csv.cpuS).toFixed(2)}x cpu`,
      );
    }
  } finally {
    server.kill('SIGTERM');
    await once(server, 'exit');
    await orm.close(true);
    await db.drop();
    rmSync(dir, { recursive: true, force: true });
  }
}

for (const d of DRIVERS) await benchDriver(d);
