// Worker thread entry (see offloop.ts): runs the synchronous file jobs
// (listing with hashes, reading an output, wiping a tmpfs) so that the bytes
// of one capsule never hold the runner's event loop for the others.
import { readlinkSync } from 'node:fs';
import { setPriority } from 'node:os';
import { parentPort, workerData } from 'node:worker_threads';
import { ownBuffer } from '../shared/node/own-buffer.js';
import { RunnerError } from '../shared/runner-protocol.js';
import { listRegular, readRegular } from './files.js';
import { wipeAndZeroize, type WipeOptions } from './wipe.js';

export type FileJob =
  | { kind: 'list'; dir: string; hashBudget: number }
  | { kind: 'read'; dir: string; name: string; maxBytes: number }
  | { kind: 'wipe'; root: string; key: Uint8Array; opts: WipeOptions };

export interface JobMessage {
  id: number;
  job: FileJob;
}

export type JobReply =
  | { id: number; ok: true; result: unknown }
  | { id: number; ok: false; error: { runner: boolean; code: string; message: string } };

function run(job: FileJob): { result: unknown; transfer: ArrayBuffer[] } {
  switch (job.kind) {
    case 'list':
      return { result: listRegular(job.dir, job.hashBudget), transfer: [] };
    case 'read': {
      const r = readRegular(job.dir, job.name, job.maxBytes);
      // readRegular reads into a Buffer.alloc of its own: moved, not copied, unless the read came up
      // short (a view of it), whose copy leaves no customer bytes behind in the original.
      const bytes = ownBuffer(r.bytes);
      if (bytes !== r.bytes) r.bytes.fill(0);
      return { result: { entry: r.entry, bytes }, transfer: [bytes.buffer as ArrayBuffer] };
    }
    case 'wipe': {
      const key = Buffer.from(job.key.buffer, job.key.byteOffset, job.key.byteLength);
      return { result: wipeAndZeroize(job.root, key, job.opts), transfer: [] };
    }
  }
}

/** Set by offloop.ts: the thread for small jobs runs at the runner's priority, the others below it. */
export interface FileWorkerData {
  nice: number;
}

// Bulk threads below the serving thread and other tenants' commands: on Linux setpriority(2) with a
// thread id renices that thread alone (and the helpers it starts inherit it). Best effort.
const { nice } = (workerData ?? { nice: 10 }) as FileWorkerData;
if (nice !== 0) {
  try {
    const tid = Number(readlinkSync('/proc/thread-self').split('/').pop());
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, nice);
  } catch {
    /* stays at the runner's priority */
  }
}

parentPort?.on('message', (m: JobMessage) => {
  let reply: JobReply;
  let transfer: ArrayBuffer[] = [];
  try {
    const r = run(m.job);
    reply = { id: m.id, ok: true, result: r.result };
    transfer = r.transfer;
  } catch (e) {
    reply = {
      id: m.id,
      ok: false,
      error:
        e instanceof RunnerError
          ? { runner: true, code: e.code, message: e.message }
          : { runner: false, code: 'internal', message: (e as Error)?.message ?? String(e) },
    };
  }
  parentPort!.postMessage(reply, transfer);
});
