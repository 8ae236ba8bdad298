// Off the event loop: a small pool of worker threads (file-worker.ts) runs
// listing/hashing, output reads and wipes. The serving thread only posts a
// job and awaits the reply, so a capsule's bytes (a 9.2 EB sparse file, a
// farm of hard links) cannot delay another tenant's exec or the ready answer.
// Jobs of one capsule run one at a time, so one tenant holds at most one worker.
import { Worker } from 'node:worker_threads';
import { RunnerError, type FileEntry, type ListedFile, type RunnerErrorCode } from '../shared/runner-protocol.js';
import type { FileJob, JobMessage, JobReply } from './file-worker.js';
import type { WipeOptions, WipeOutcome } from './wipe.js';

const WORKER_URL = new URL('./file-worker.js', import.meta.url);

interface Slot {
  worker: Worker;
  busy: ((r: JobReply) => void) | null;
}

interface Pending {
  job: FileJob;
  transfer: ArrayBuffer[];
  resolve: (r: JobReply) => void;
}

export class FileWorkers {
  private readonly slots: Slot[] = [];
  private readonly queue: Pending[] = [];
  private readonly perKey = new Map<string, Promise<unknown>>();
  private nextId = 1;
  private closed = false;

  constructor(private readonly maxWorkers = 4) {}

  private spawn(): Slot {
    const worker = new Worker(WORKER_URL);
    worker.unref();
    const slot: Slot = { worker, busy: null };
    const fail = (message: string): void => {
      const i = this.slots.indexOf(slot);
      if (i >= 0) this.slots.splice(i, 1);
      const b = slot.busy;
      slot.busy = null;
      b?.({ id: 0, ok: false, error: { runner: false, code: 'internal', message } });
      this.pump();
    };
    worker.on('message', (r: JobReply) => {
      const b = slot.busy;
      slot.busy = null;
      b?.(r);
      this.pump();
    });
    worker.on('error', (e) => fail(`file worker failed: ${e.message}`));
    worker.on('exit', (code) => fail(`file worker exited with ${code}`));
    this.slots.push(slot);
    return slot;
  }

  private pump(): void {
    while (this.queue.length > 0 && !this.closed) {
      let slot = this.slots.find((s) => s.busy === null);
      if (!slot && this.slots.length < this.maxWorkers) {
        try {
          slot = this.spawn();
        } catch (e) {
          // No thread could start: with none running, nothing would ever take the queue, so fail it now.
          if (this.slots.length > 0) return;
          const message = `file worker could not start: ${(e as Error).message}`;
          for (const p of this.queue.splice(0))
            p.resolve({ id: 0, ok: false, error: { runner: false, code: 'internal', message } });
          return;
        }
      }
      if (!slot) return;
      const p = this.queue.shift()!;
      slot.busy = p.resolve;
      const msg: JobMessage = { id: this.nextId++, job: p.job };
      slot.worker.postMessage(msg, p.transfer);
    }
  }

  private async submit(key: string, job: FileJob, transfer: ArrayBuffer[] = []): Promise<unknown> {
    if (this.closed) throw new RunnerError('unavailable', 'runner is shutting down');
    const prev = this.perKey.get(key) ?? Promise.resolve();
    const mine = prev.then(
      () =>
        new Promise<JobReply>((resolve) => {
          this.queue.push({ job, transfer, resolve });
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

  async list(key: string, dir: string, hashBudget: number): Promise<ListedFile[]> {
    return (await this.submit(key, { kind: 'list', dir, hashBudget })) as ListedFile[];
  }

  async read(key: string, dir: string, name: string, maxBytes: number): Promise<{ entry: FileEntry; bytes: Buffer }> {
    const r = (await this.submit(key, { kind: 'read', dir, name, maxBytes })) as {
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
    key: string,
    root: string,
    capsuleKey: Buffer,
    opts: WipeOptions = {},
  ): Promise<WipeOutcome & { keyReadbackZero: boolean }> {
    const moved = new Uint8Array(capsuleKey.byteLength);
    moved.set(capsuleKey);
    capsuleKey.fill(0);
    let out: WipeOutcome & { keyReadbackZero: boolean };
    try {
      out = (await this.submit(key, { kind: 'wipe', root, key: moved, opts }, [moved.buffer])) as WipeOutcome & {
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
