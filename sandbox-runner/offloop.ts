// Off the event loop: a small pool of worker threads (file-worker.ts) runs
// listing/hashing, output reads and wipes. The serving thread only posts a
// job and awaits the reply, so a capsule's bytes (a 9.2 EB sparse file, a
// farm of hard links) cannot delay another tenant's exec or the ready answer.
// Jobs of one capsule run one at a time. Queued jobs go to the tenant with the
// fewest jobs running (first come among equals), and a job over few bytes and
// files (what the capsule's tmpfs holds, measured by the caller) has a thread
// of its own besides: an ordinary download or destroy never waits behind other
// tenants' gigabytes (measured: 1.8 s behind twelve full tmpfs in the soak).
// That thread runs at the serving thread's priority, the others below it: a
// small job is short by construction, and at nice 10 a light tenant's 1 KB
// wipe waited up to 100 ms for a CPU on a busy node.
import { Worker } from 'node:worker_threads';
import { RunnerError, type FileEntry, type ListedFile, type RunnerErrorCode } from '../shared/runner-protocol.js';
import type { FileJob, FileWorkerData, JobMessage, JobReply } from './file-worker.js';
import type { WipeOptions, WipeOutcome } from './wipe.js';

const WORKER_URL = new URL('./file-worker.js', import.meta.url);
/** Thread names of the file threads (at most 15 characters, the kernel's bound). */
export const FILE_THREAD_SMALL = 'files-small';
export const FILE_THREAD_BULK = 'files-bulk';

/** A job over at most this many bytes and files may also run on the thread kept for small jobs. */
export const SMALL_JOB_BYTES = 8 * 1024 * 1024;
export const SMALL_JOB_FILES = 1024;

/** Who a job is for and how much it has to go through (bytes on the capsule's tmpfs). */
export interface JobOwner {
  /** The capsule: its jobs run one at a time. */
  capsule: string;
  /** The account's opaque label (the capsule's own id when it has none): the unit of fairness. */
  tenant: string;
  bytes: number;
  /** Files and directories on it (absent: not measured, only bytes count). */
  files?: number;
}

interface Slot {
  worker: Worker;
  /** The thread kept for small jobs. */
  small: boolean;
  busy: { resolve: (r: JobReply) => void; tenant: string } | null;
}

interface Pending {
  job: FileJob;
  transfer: ArrayBuffer[];
  resolve: (r: JobReply) => void;
  tenant: string;
  small: boolean;
}

export class FileWorkers {
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private readonly perKey = new Map<string, Promise<unknown>>();
  /** tenant -> jobs running now. */
  private readonly running = new Map<string, number>();
  private nextId = 1;
  private closed = false;

  /** maxWorkers: threads for any job; one more is kept for small jobs. */
  constructor(private readonly maxWorkers = 4) {}

  /**
   * Starts the small jobs' thread and one bulk thread now: a thread's start-up (some 200 ms of
   * module loading) then stays off the first list, download and destroy after the runner starts.
   */
  warm(): void {
    try {
      for (const small of [true, false]) if (!this.slots.some((s) => s.small === small)) this.spawn(small);
    } catch {
      /* started on demand instead (pump reports a thread that cannot start) */
    }
  }

  private spawn(small: boolean): Slot {
    // The name becomes the OS thread's name (top -H, /proc/<pid>/task/<tid>/comm).
    const worker = new Worker(WORKER_URL, {
      name: small ? FILE_THREAD_SMALL : FILE_THREAD_BULK,
      workerData: { nice: small ? 0 : 10 } satisfies FileWorkerData,
    });
    worker.unref();
    const slot: Slot = { worker, small, busy: null };
    const done = (r: JobReply): void => {
      const b = slot.busy;
      slot.busy = null;
      if (b) {
        const n = (this.running.get(b.tenant) ?? 1) - 1;
        if (n > 0) this.running.set(b.tenant, n);
        else this.running.delete(b.tenant);
        b.resolve(r);
      }
      this.pump();
    };
    const fail = (message: string): void => {
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      done({ id: 0, ok: false, error: { runner: false, code: 'internal', message } });
    };
    worker.on('message', done);
    worker.on('error', (e) => fail(`file worker failed: ${e.message}`));
    worker.on('exit', (code) => fail(`file worker exited with ${code}`));
    this.slots.push(slot);
    return slot;
  }

  /** The next job for a free thread of this kind: the least busy tenant's oldest. */
  private pick(small: boolean): number {
    let best = -1;
    let load = Infinity;
    for (let i = 0; i < this.queue.length; i++) {
      const p = this.queue[i]!;
      if (small && !p.small) continue;
      const n = this.running.get(p.tenant) ?? 0;
      if (n < load) {
        best = i;
        load = n;
      }
    }
    return best;
  }

  /** A free thread of this kind, started when there are fewer than its bound (null: none). */
  private idle(small: boolean): Slot | null {
    const free = this.slots.find((s) => s.small === small && s.busy === null);
    if (free) return free;
    if (this.slots.filter((s) => s.small === small).length >= (small ? 1 : this.maxWorkers)) return null;
    return this.spawn(small);
  }

  private pump(): void {
    let moved = true;
    while (moved && this.queue.length > 0 && !this.closed) {
      moved = false;
      // The small jobs' thread first: a small job waiting goes there rather than to a thread below it.
      for (const small of [true, false]) {
        const i = this.pick(small);
        if (i < 0) continue;
        let slot: Slot | null;
        try {
          slot = this.idle(small);
        } catch (e) {
          // No thread could start: with none running, nothing would ever take the queue, so fail it now.
          if (this.slots.length > 0) continue;
          const message = `file worker could not start: ${(e as Error).message}`;
          for (const p of this.queue.splice(0))
            p.resolve({ id: 0, ok: false, error: { runner: false, code: 'internal', message } });
          return;
        }
        if (!slot) continue;
        const p = this.queue.splice(i, 1)[0]!;
        slot.busy = { resolve: p.resolve, tenant: p.tenant };
        this.running.set(p.tenant, (this.running.get(p.tenant) ?? 0) + 1);
        const msg: JobMessage = { id: this.nextId++, job: p.job };
        slot.worker.postMessage(msg, p.transfer);
        moved = true;
      }
    }
  }

  private async submit(owner: JobOwner, job: FileJob, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.closed) throw new RunnerError('unavailable', 'runner is shutting down');
    const key = owner.capsule;
    const prev = this.perKey.get(key) ?? Promise.resolve();
    const mine = prev.then(
      () =>
        new Promise<JobReply>((resolve) => {
          const small = owner.bytes <= SMALL_JOB_BYTES && (owner.files ?? 0) <= SMALL_JOB_FILES;
          this.queue.push({ job, transfer, resolve, tenant: owner.tenant, small });
          this.pump();
        }),
    );
    const settled = mine.then(
      () => undefined,
      () => undefined,
    );
    this.perKey.set(key, settled);
    void settled.then(() => {
      if (this.perKey.get(key) === settled) this.perKey.delete(key);
    });
    const r = await mine;
    if (r.ok) return r.result;
    if (r.error.runner) throw new RunnerError(r.error.code as RunnerErrorCode, r.error.message);
    throw new Error(r.error.message);
  }

  async list(owner: JobOwner, dir: string, hashBudget: number): Promise<ListedFile[]> {
    return (await this.submit(owner, { kind: 'list', dir, hashBudget })) as ListedFile[];
  }

  async read(
    owner: JobOwner,
    dir: string,
    name: string,
    maxBytes: number,
  ): Promise<{ entry: FileEntry; bytes: Buffer }> {
    const r = (await this.submit(owner, { kind: 'read', dir, name, maxBytes })) as {
      entry: FileEntry;
      bytes: Uint8Array;
    };
    return { entry: r.entry, bytes: Buffer.from(r.bytes.buffer, r.bytes.byteOffset, r.bytes.byteLength) };
  }

  /**
   * Wipes root in a worker. The key is copied into a buffer moved to the
   * worker (which zeroizes it after use), then key is zeroized here and read
   * back: keyReadbackZero covers both copies.
   */
  async wipe(
    owner: JobOwner,
    root: string,
    capsuleKey: Buffer,
    opts: WipeOptions = {},
  ): Promise<WipeOutcome & { keyReadbackZero: boolean }> {
    const moved = new Uint8Array(capsuleKey.byteLength);
    moved.set(capsuleKey);
    capsuleKey.fill(0);
    let out: WipeOutcome & { keyReadbackZero: boolean };
    try {
      out = (await this.submit(owner, { kind: 'wipe', root, key: moved, opts }, [moved.buffer])) as WipeOutcome & {
        keyReadbackZero: boolean;
      };
    } finally {
      if (moved.byteLength > 0) moved.fill(0); // length 0 once moved (detached); zeroed if the post never happened
    }
    return { ...out, keyReadbackZero: out.keyReadbackZero && capsuleKey.every((b) => b === 0) };
  }

  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.slots.splice(0).map((s) => s.worker.terminate()));
  }
}
