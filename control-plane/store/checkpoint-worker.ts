// Worker thread of the SQLite checkpointer (checkpointer.ts): its own libsql
// connection to the database file runs a PASSIVE checkpoint every interval,
// so the copy of the WAL into the database file and its fsyncs never run on
// the serving thread. Any error ends the thread; the parent then falls back.
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'libsql';

export interface CheckpointWorkerData {
  file: string;
  synchronous: 'full' | 'normal';
  intervalMs: number;
}

const { file, synchronous, intervalMs } = workerData as CheckpointWorkerData;
const db = new Database(file);
db.exec('pragma busy_timeout = 5000');
// The checkpoint fsyncs the WAL and the database file at NORMAL and FULL alike (never at OFF).
db.exec(`pragma synchronous = ${synchronous}`);

// PASSIVE never waits for readers or writers: it copies the frames no reader
// still needs (busy, another process's checkpoint, just means next time).
const timer = setInterval(() => db.exec('pragma wal_checkpoint(PASSIVE)'), intervalMs);

parentPort!.on('message', (m: unknown) => {
  if (m !== 'stop') return;
  clearInterval(timer);
  db.close();
  parentPort!.close(); // nothing left: the thread ends
});
