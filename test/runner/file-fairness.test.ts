// The runner's file threads (offloop.ts) under one tenant's bulk: another
// tenant's small job runs at once on the thread kept for small jobs, and a
// second tenant's large job goes before the first tenant's later ones.
import t from 'tap';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  FILE_THREAD_BULK,
  FILE_THREAD_SMALL,
  FileWorkers,
  SMALL_JOB_BYTES,
  SMALL_JOB_FILES,
} from '../../sandbox-runner/offloop.js';

const MiB = 1024 * 1024;

t.test('small jobs never queue behind bulk; tenants take turns', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'capsule-fairness-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const big = join(root, 'big');
  mkdirSync(big);
  writeFileSync(join(big, 'data'), Buffer.alloc(48 * MiB, 7));
  // Tenant c's job is bulk too (above SMALL_JOB_BYTES) but a quarter of an a job: started fairly (after
  // a0 or a1) it ends long before a4 even on a loaded node; started first come, first served (after
  // a5) it ends among the last two.
  const mid = join(root, 'mid');
  mkdirSync(mid);
  writeFileSync(join(mid, 'data'), Buffer.alloc(12 * MiB, 7));
  const small = join(root, 'small');
  mkdirSync(small);
  writeFileSync(join(small, 'out.txt'), 'result\n');

  const files = new FileWorkers(2);
  t.teardown(() => files.close());
  const bigOwner = (tenant: string, i: number) => ({ capsule: `${tenant}-${i}`, tenant, bytes: 48 * MiB });
  // Start the threads (a thread's start-up is not what is measured here).
  await Promise.all([
    files.list(bigOwner('warm', 0), small, 64 * MiB),
    files.list(bigOwner('warm', 1), small, 64 * MiB),
    files.read({ capsule: 'warm-2', tenant: 'warm', bytes: 0 }, small, 'out.txt', MiB),
  ]);

  const order: string[] = [];
  const track = <T>(name: string, p: Promise<T>): Promise<T> => p.then((v) => (order.push(name), v));
  const t0 = performance.now();
  const jobs = [];
  for (let i = 0; i < 6; i++) jobs.push(track(`a${i}`, files.list(bigOwner('a', i), big, 64 * MiB)));
  const c = track('c', files.list({ capsule: 'c-0', tenant: 'c', bytes: 12 * MiB }, mid, 64 * MiB));
  let smallMs = 0;
  const b = track(
    'b',
    files.read({ capsule: 'b-0', tenant: 'b', bytes: 4096 }, small, 'out.txt', MiB).then((r) => {
      smallMs = performance.now() - t0;
      return r;
    }),
  );
  const [listed] = await Promise.all(jobs);
  await Promise.all([b, c]);
  const bulkMs = performance.now() - t0;

  t.equal(listed!.length, 1, 'the bulk jobs ran for real');
  t.equal(order.indexOf('b'), 0, `the small read finished first (order ${order.join(' ')})`);
  t.ok(smallMs < bulkMs / 4, `small read ${smallMs.toFixed(0)} ms against ${bulkMs.toFixed(0)} ms of bulk`);
  // Two threads: a0 and a1 start at once; c (tenant c, nothing running) starts next, before a2..a5.
  // Only completions are seen (seen in a loaded suite with c as large as the others: b a1 a0 a2 c ...,
  // and once b a0 a1 a2 a3 a4 c a5, hence the smaller c); first come, first served would have
  // started c after a5, so that it ended among the last two.
  const cAt = order.indexOf('c');
  t.ok(
    cAt >= 0 && cAt < order.length - 2,
    `tenant c's job went before tenant a's later ones (order ${order.join(' ')})`,
  );
  t.ok(SMALL_JOB_BYTES >= 4096 && SMALL_JOB_BYTES < 12 * MiB, 'b is a small job, c and a are bulk');
});

/**
 * This process's file threads and their nice values (field 19 of /proc/self/task/<tid>/stat), as
 * "name nice". By name: libuv's pool and V8's helpers start threads of their own at any time.
 */
function threadNice(): Map<string, string> {
  const out = new Map<string, string>();
  for (const tid of readdirSync('/proc/self/task')) {
    try {
      const name = readFileSync(`/proc/self/task/${tid}/comm`, 'utf8').trim();
      if (name !== FILE_THREAD_SMALL && name !== FILE_THREAD_BULK) continue;
      const stat = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8');
      out.set(tid, `${name} ${stat.slice(stat.lastIndexOf(')') + 2).split(' ')[16]}`);
    } catch {
      /* ended meanwhile */
    }
  }
  return out;
}

t.test("the small jobs' thread runs at the runner's priority, bulk threads below it", async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'capsule-nice-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  writeFileSync(join(root, 'out.txt'), 'result\n');
  const files = new FileWorkers(1);
  t.teardown(() => files.close());
  const before = threadNice();
  const newThreads = (): string[] => [...threadNice()].filter(([tid]) => !before.has(tid)).map(([, n]) => n);

  await files.read({ capsule: 's', tenant: 's', bytes: 4096, files: 3 }, root, 'out.txt', 1024);
  t.same(newThreads(), [`${FILE_THREAD_SMALL} 0`], 'a small job started the small thread, at nice 0');
  // Small in bytes but not in files (a tmpfs of empty directories): bulk.
  await files.list({ capsule: 'd', tenant: 'd', bytes: 4096, files: SMALL_JOB_FILES + 1 }, root, 1024);
  t.same(
    newThreads().sort(),
    [`${FILE_THREAD_BULK} 10`, `${FILE_THREAD_SMALL} 0`],
    'a job over many files started a bulk thread, at nice 10 (it is not a small job)',
  );
});

t.test('warm() starts the small and one bulk thread before any job', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'capsule-warm-'));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  writeFileSync(join(root, 'out.txt'), 'result\n');
  const before = threadNice();
  const files = new FileWorkers(2);
  t.teardown(() => files.close());
  files.warm();
  files.warm(); // idempotent: still one of each
  const named = (): string[] =>
    [...threadNice()]
      .filter(([tid]) => !before.has(tid))
      .map(([, n]) => n)
      .sort();
  const want = [`${FILE_THREAD_BULK} 10`, `${FILE_THREAD_SMALL} 0`];
  // A thread is named as it starts and renices itself a moment later.
  const deadline = Date.now() + 10_000;
  while (named().join() !== want.join() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.same(named(), want, 'both threads run, no job asked yet');
  await files.read({ capsule: 's', tenant: 's', bytes: 4096, files: 3 }, root, 'out.txt', 1024);
  await files.list({ capsule: 'd', tenant: 'd', bytes: 4096, files: SMALL_JOB_FILES + 1 }, root, 1024);
  t.equal(named().length, 2, 'a small and a bulk job started no thread of their own');
});
