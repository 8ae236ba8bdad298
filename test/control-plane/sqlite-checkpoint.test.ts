// SQLite checkpoints run in a worker thread (control-plane/store/checkpointer.ts),
// never inside a commit of the serving connection: that connection has
// wal_autocheckpoint = 0, yet megabytes written through it reach the database
// file within a few intervals and the WAL is reused rather than grown; closing
// the store ends the thread, and a worker that dies turns the main
// connection's automatic checkpoints back on.
import t, { type Test } from 'tap';
import { subscribe, unsubscribe } from 'node:diagnostics_channel';
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Worker } from 'node:worker_threads';
import { openOrm, type Orm } from '../../control-plane/store/orm.js';
import { SqlStore } from '../../control-plane/store/sql-store.js';
import { AUTOCHECKPOINT_PAGES, CHECKPOINT_MS } from '../../control-plane/store/checkpointer.js';
import { until } from '../helpers/until.js';

const BLOB = 100_000;
const BATCH = 80; // 8 MB: about 2,000 pages of 4 KiB, twice the default autocheckpoint
const size = (f: string): number => (existsSync(f) ? statSync(f).size : 0);

/**
 * Whether the last checkpoint ended, having copied every frame of the WAL: the
 * WAL-index (the -shm file, SQLite's wal.c) holds mxFrame at byte 16 of its
 * header and nBackfill at byte 96, native order. Only then does the next writer
 * restart the WAL; a checkpoint still in its fsync (seconds on a busy disk) has
 * written the pages but not yet said so.
 */
function checkpointed(file: string): boolean {
  const shm = readFileSync(`${file}-shm`);
  const mxFrame = shm.readUInt32LE(16);
  return mxFrame > 0 && shm.readUInt32LE(96) === mxFrame;
}
/** Long enough for a checkpoint's fsyncs beside a test writing gigabytes; a passing run waits an interval or two. */
const EVENTUALLY_MS = 60 * CHECKPOINT_MS;

/** The store on a fresh SQLite file, with the worker threads its opening started. */
async function open(t: Test): Promise<{ file: string; orm: Orm; store: SqlStore; workers: Worker[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'cp-ckpt-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'capsule.db');
  const workers: Worker[] = [];
  const onWorker = (m: unknown): void => void workers.push((m as { worker: Worker }).worker);
  subscribe('worker_threads', onWorker);
  let orm: Orm;
  try {
    orm = await openOrm({ driver: 'sqlite', file, synchronous: 'normal' });
  } finally {
    unsubscribe('worker_threads', onWorker);
  }
  return { file, orm, store: new SqlStore(orm), workers };
}

async function autocheckpoint(orm: Orm): Promise<number> {
  const rows = await orm.em.getConnection().execute<{ wal_autocheckpoint: number }[]>('pragma wal_autocheckpoint');
  return rows[0]!.wal_autocheckpoint;
}

async function writeBatch(orm: Orm): Promise<void> {
  const conn = orm.em.getConnection();
  for (let i = 0; i < BATCH; i++) await conn.execute('insert into bulk (b) values (randomblob(?))', [BLOB], 'run');
}

const exited = (w: Worker): Promise<number> => new Promise((r) => w.once('exit', r));

t.test('the worker checkpoints what the main connection commits; the WAL is reused', async (t) => {
  const { file, orm, store, workers } = await open(t);
  t.equal(workers.length, 1, 'opening the store started one worker thread');
  t.equal(await autocheckpoint(orm), 0, 'the main connection never checkpoints in a commit');
  await orm.em.getConnection().execute('create table bulk (b blob)', [], 'run');

  const base = size(file);
  await writeBatch(orm);
  t.ok(
    await until(() => size(file) >= base + BATCH * BLOB && checkpointed(file), EVENTUALLY_MS),
    'the 8 MB committed on the main connection reached the database file',
    { base, db: size(file), wal: size(`${file}-wal`), checkpointed: checkpointed(file) },
  );
  const wal1 = size(`${file}-wal`);

  await writeBatch(orm);
  t.ok(
    await until(() => size(file) >= base + 2 * BATCH * BLOB && checkpointed(file), EVENTUALLY_MS),
    'the second batch reached the database file too',
    { base, db: size(file), wal: size(`${file}-wal`), checkpointed: checkpointed(file) },
  );
  const wal2 = size(`${file}-wal`);
  t.ok(wal2 < 1.5 * BATCH * BLOB, 'the WAL was restarted from its start, not grown to hold both batches', {
    wal1,
    wal2,
  });
  t.equal(await autocheckpoint(orm), 0, 'the worker is still the only checkpointer');
  await store.close();
});

t.test('closing the store ends the worker thread, which closes its connection first', async (t) => {
  const { orm, store, workers } = await open(t);
  const w = workers[0]!;
  let terminated = false;
  const terminate = w.terminate.bind(w);
  w.terminate = () => ((terminated = true), terminate());
  let code: number | null = null;
  w.once('exit', (c) => (code = c));
  await orm.em.getConnection().execute('create table bulk (b blob)', [], 'run');
  await writeBatch(orm);
  await store.close();
  t.equal(code, 0, 'the thread had ended when close resolved');
  t.notOk(terminated, 'on its own: its stop handler closed the connection and left nothing to run');
  await store.close(); // closing twice is harmless
});

t.test('a worker that dies turns automatic checkpoints back on', async (t) => {
  const { orm, store, workers } = await open(t);
  const warned = new Promise<Error>((r) => process.once('warning', r));
  const w = workers[0]!;
  await Promise.all([exited(w), w.terminate()]);
  t.match((await warned).message, /SQLite checkpointer stopped/);
  let pages = 0;
  for (let i = 0; i < 40 && pages !== AUTOCHECKPOINT_PAGES; i++) {
    pages = await autocheckpoint(orm);
    if (pages !== AUTOCHECKPOINT_PAGES) await sleep(25);
  }
  t.equal(pages, AUTOCHECKPOINT_PAGES, 'the main connection checkpoints in its commits again');
  await store.close();
});
