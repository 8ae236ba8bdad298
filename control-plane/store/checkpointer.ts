// SQLite checkpoints off the serving thread. In WAL mode SQLite copies the WAL
// into the database file, and fsyncs both, inside whichever commit crosses
// wal_autocheckpoint pages; libsql runs on the event loop, so that one commit
// froze the API for every tenant (142 and 240 ms against ~3 ms in a soak). The
// main connection runs with wal_autocheckpoint = 0 and a worker thread
// (checkpoint-worker.ts), on a connection of its own, checkpoints every
// CHECKPOINT_MS. Durability is unchanged: a commit's durability is the WAL
// write (synchronous = full still fsyncs the WAL at every commit, normal still
// does not); a checkpoint only copies committed frames into the database file.
//
// WARNING: nothing else checkpoints: if the worker stops while the store is
// open, the WAL grows without bound. What bounds it: the worker's death (an
// error, or failing to start) turns wal_autocheckpoint back on for the main
// connection (the stall returns, the growth stops), and stop() comes only with
// the ORM's close. A PASSIVE checkpoint cannot copy frames a reader still
// uses: a long read transaction holds the WAL, as it always did.
import { Worker } from 'node:worker_threads';
import type { CheckpointWorkerData } from './checkpoint-worker.js';

/** How often the worker checkpoints: the WAL holds about this long of writes, then starts over. */
export const CHECKPOINT_MS = 500;
/** SQLite's default, put back on the main connection if the worker dies. */
export const AUTOCHECKPOINT_PAGES = 1000;

export interface Checkpointer {
  /** Ends the worker and closes its connection (before the main connection closes). */
  stop(): Promise<void>;
}

/** Starts the worker on `file`; `onDeath` runs once if it ends other than by stop(). */
export function startCheckpointer(
  file: string,
  synchronous: 'full' | 'normal',
  onDeath: (why: string) => void,
): Checkpointer {
  const data: CheckpointWorkerData = { file, synchronous, intervalMs: CHECKPOINT_MS };
  const worker = new Worker(new URL('./checkpoint-worker.js', import.meta.url), { workerData: data });
  worker.unref(); // never keeps the process alive
  let stopping = false;
  let why = 'exited';
  worker.on('error', (e) => (why = e.message));
  const exited = new Promise<void>((resolve) =>
    worker.once('exit', (code) => {
      if (!stopping) onDeath(`${why} (exit code ${code})`);
      resolve();
    }),
  );
  return {
    async stop() {
      if (stopping) return exited;
      stopping = true;
      worker.postMessage('stop');
      // A checkpoint in progress finishes first; one stuck past this is cut off.
      // The timer also keeps the process alive until the thread has ended.
      const stuck = setTimeout(() => void worker.terminate(), 10_000);
      await exited;
      clearTimeout(stuck);
    },
  };
}
