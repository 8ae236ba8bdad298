// One worker thread for verifying large POST /v1/verify bodies (an AuditRecord
// of 20,000 execs takes seconds: docs/PERFORMANCE.md). Jobs run one at a time
// in arrival order, so large verifies use at most one core and never stall the
// request thread; the route's byte budget bounds what waits. Started on first
// use; a worker that dies fails its jobs (500) and the next job starts a new one.
import { Worker } from 'node:worker_threads';
import { ownBuffer } from '../../shared/node/own-buffer.js';
import { ApiError } from '../../shared/errors.js';
import type { HostedResult } from './hosted-verify.js';
import type { VerifyJob, VerifyReply } from './verify-worker.js';

/** Old-generation heap of the worker: 11x the largest default body (docs/PERFORMANCE.md) with room to spare. */
const WORKER_HEAP_MB = 512;

export class VerifyPool {
  private worker: Worker | null = null;
  private readonly pending = new Map<number, { resolve: (r: HostedResult) => void; reject: (e: unknown) => void }>();
  private nextId = 1;

  private start(): Worker {
    const w = new Worker(new URL('./verify-worker.js', import.meta.url), {
      resourceLimits: { maxOldGenerationSizeMb: WORKER_HEAP_MB },
    });
    w.unref(); // never keeps the process alive
    w.on('message', (m: VerifyReply) => {
      const p = this.pending.get(m.id);
      if (!p) return;
      this.pending.delete(m.id);
      if ('result' in m) p.resolve(m.result as HostedResult);
      else if ('error' in m) p.reject(new ApiError(m.error.code, m.error.message, { extra: m.error.extra }));
      else p.reject(new Error(`verify worker: ${m.crash}`));
    });
    const fail = (why: unknown): void => {
      if (this.worker === w) this.worker = null;
      const all = [...this.pending.values()];
      this.pending.clear();
      for (const p of all)
        p.reject(new Error(`verify worker stopped: ${why instanceof Error ? why.message : String(why)}`));
    };
    w.on('error', fail);
    w.on('exit', (code) => fail(`exit ${code}`));
    return w;
  }

  /** Parses and verifies one request body (bytes already bounded and depth-checked). */
  run(bytes: Uint8Array, now: string): Promise<HostedResult> {
    this.worker ??= this.start();
    const id = this.nextId++;
    // Transfer, not copy, when the bytes own their whole buffer.
    const own = ownBuffer(bytes);
    const job: VerifyJob = { id, bytes: own, now };
    const worker = this.worker;
    return new Promise<HostedResult>((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      worker.postMessage(job, [own.buffer as ArrayBuffer]);
    });
  }

  async close(): Promise<void> {
    const w = this.worker;
    this.worker = null;
    if (w) await w.terminate();
  }
}
