// Execs off the serving thread. Starting a process (fork and exec) is
// synchronous in Node and costs the more the larger the process is: 1 ms
// from a small process, 6-20 ms from the runner once uploads have grown its
// heap, and more while capsules keep every core busy (the parent waits for
// its child to reach exec). One worker thread (exec-thread.ts) therefore
// starts every sandbox wrapper and owns its pipes, timeout and output
// capture; the serving thread posts a request and awaits the outcome, so a
// busy node delays the execs themselves, not every other tenant's frames.
// Sealed egress's attach and detach (`ip`, the relay, the namespace sweep
// over /proc) run there too, for the same reason.
import { Worker } from 'node:worker_threads';
import { ownBuffer } from '../shared/node/own-buffer.js';
import { within } from '../shared/time.js';
import { RunnerError, type RunnerErrorCode } from '../shared/runner-error.js';
import type { ExecOutcome, ExecParams, SandboxObservation } from './exec.js';
import type { WriterResult } from './charged.js';
import type { SandboxSpec } from './sandbox.js';
import type { CapsuleCgroupPaths } from './cgroup.js';
import { detachEgress, type EgressDetached, type EgressState } from './egress.js';

const THREAD_URL = new URL('./exec-thread.js', import.meta.url);

/** A wrapper started ahead of time in the exec thread, waiting inside its capsule's cgroups. */
export interface PreparedRef {
  id: number;
  alive: boolean;
  /** Whose turn it waits for in the exec thread (fair-queue.ts): the tenant, or the capsule alone. */
  key: string;
}

/** What a run needs; clock and the prepared wrapper live in the exec thread. */
export type RunParams = Omit<ExecParams, 'clock' | 'prepared'> & { prepared: PreparedRef | null };

/**
 * Serving thread -> exec thread: every request but an abort waits its tenant's turn (`key`); a
 * light tenant's (`light`, light-tenants.ts) goes first (exec-order.ts).
 */
export type ToThread = (Request & { key: string; light?: boolean }) | { op: 'abort'; id: number } | { op: 'close' };

type Request =
  | {
      op: 'prepare';
      id: number;
      cgroup: CapsuleCgroupPaths;
      /** Its CPU in the quick lane (cgroup.ts placeCpu). */
      quick: boolean;
      spec: SandboxSpec;
      seccompPath: string;
      ahead: boolean;
      /** Its exec will be observed: look at the sandbox once it is set up (prepareExec). */
      look: boolean;
    }
  | { op: 'wprepare'; id: number; writerProcs: string[] }
  | {
      op: 'write';
      id: number;
      writerProcs: string[];
      prepared: number | null;
      header: string;
      chunks: Uint8Array[];
      hash: boolean[];
    }
  | { op: 'drop'; id: number }
  | { op: 'start'; id: number }
  | {
      op: 'run';
      id: number;
      prepared: number | null;
      params: Omit<RunParams, 'prepared' | 'observe' | 'onStart'>;
      observe: boolean;
    }
  | { op: 'attach'; id: number; netns: string; proxySocket: string }
  | { op: 'detach'; id: number; state: EgressState };

/** What the thread answers to a run, write, attach or detach. */
export type ThreadValue = ExecOutcome | WriterResult | EgressState | EgressDetached;

/** Exec thread -> serving thread. */
export type FromThread =
  | { op: 'closed' }
  | { op: 'exited'; id: number }
  | { op: 'dropped'; id: number }
  | { op: 'observe'; id: number; o: SandboxObservation }
  | { op: 'done'; id: number; value: ThreadValue }
  | { op: 'failed'; id: number; code: RunnerErrorCode | null; message: string };

interface Run {
  /** The ThreadValue the request that made it expects. */
  resolve: (v: never) => void;
  reject: (e: Error) => void;
  observe?: (o: SandboxObservation) => void;
}

export class ExecHost {
  private worker: Worker | null = null;
  private nextId = 1;
  private readonly runs = new Map<number, Run>();
  private readonly prepared = new Map<number, PreparedRef>();
  private readonly drops = new Map<number, () => void>();
  private closing: (() => void) | null = null;

  /**
   * Starts the thread now (its start-up, some 50 ms, stays off the first exec's path). `isLight`
   * says whether a tenant's requests go ahead of others' in the thread.
   */
  constructor(private readonly isLight: (key: string) => boolean = () => false) {
    this.thread();
  }

  private thread(): Worker {
    if (this.worker) return this.worker;
    const w = new Worker(THREAD_URL);
    w.unref();
    w.on('message', (m: FromThread) => this.onMessage(m));
    const lost = (why: string): void => {
      if (this.worker !== w) return;
      this.worker = null;
      // Its wrappers and execs died with it (their pipes were its own): fail them, start afresh next time.
      for (const r of this.runs.values()) r.reject(new RunnerError('internal', `exec thread ${why}`));
      this.runs.clear();
      for (const p of this.prepared.values()) p.alive = false;
      this.prepared.clear();
      for (const d of this.drops.values()) d();
      this.drops.clear();
    };
    w.on('error', (e) => lost(`failed: ${e.message}`));
    w.on('exit', (code) => lost(`exited with ${code}`));
    this.worker = w;
    return w;
  }

  private onMessage(m: FromThread): void {
    switch (m.op) {
      case 'closed':
        this.closing?.();
        return;
      case 'exited': {
        const p = this.prepared.get(m.id);
        if (p) p.alive = false;
        this.prepared.delete(m.id);
        return;
      }
      case 'dropped':
        this.drops.get(m.id)?.();
        this.drops.delete(m.id);
        return;
      case 'observe':
        this.runs.get(m.id)?.observe?.(m.o);
        return;
      case 'done':
        this.runs.get(m.id)?.resolve(m.value as never);
        this.runs.delete(m.id);
        return;
      case 'failed':
        this.runs.get(m.id)?.reject(m.code ? new RunnerError(m.code, m.message) : new Error(m.message));
        this.runs.delete(m.id);
    }
  }

  /**
   * Starts the next exec's wrapper in the exec thread (as the uid wrapperUid gives; in the capsule's
   * cgroups, waiting), its sandbox set up ahead of time if `ahead` (prepareExec).
   */
  prepare(
    key: string,
    cgroup: CapsuleCgroupPaths,
    quick: boolean,
    spec: SandboxSpec,
    seccompPath: string,
    ahead: boolean,
    look = false,
  ): PreparedRef {
    return this.hold(key, (id) => ({ op: 'prepare', id, cgroup, quick, spec, seccompPath, ahead, look }));
  }

  /** Starts a capsule's next writer (charged.ts) in the exec thread; it joins the writer leaf, then waits. */
  prepareWriter(key: string, writerProcs: string[]): PreparedRef {
    return this.hold(key, (id) => ({ op: 'wprepare', id, writerProcs }));
  }

  private hold(key: string, message: (id: number) => Request): PreparedRef {
    const ref: PreparedRef = { id: this.nextId++, alive: true, key };
    this.prepared.set(ref.id, ref);
    this.thread().postMessage({ ...message(ref.id), key, light: this.isLight(key) } satisfies ToThread);
    return ref;
  }

  /** The id of a prepared process the thread may use (it is used once), or null when it is gone. */
  private use(prepared: PreparedRef | null): number | null {
    if (!prepared) return null;
    this.prepared.delete(prepared.id);
    return prepared.alive ? prepared.id : null;
  }

  /**
   * One write through a writer in the exec thread. A large chunk that owns its buffer (an upload's
   * frame body) is moved there, not copied: it reads as empty here afterwards. Others are copied. The
   * thread hashes what is asked and zeroes its bytes once written.
   */
  write(
    key: string,
    writerProcs: string[],
    prepared: PreparedRef | null,
    header: string,
    chunks: Uint8Array[],
    hash: boolean[],
  ): Promise<WriterResult> {
    // A large chunk that has its buffer to itself (framing.ts gives large bodies one) is moved, not copied.
    const sent = chunks.map((c) => (c.byteLength >= 64 * 1024 ? ownBuffer(c) : new Uint8Array(c)));
    const transfer = [...new Set(sent.map((c) => c.buffer as ArrayBuffer))];
    return this.request<WriterResult>(
      key,
      (id) => ({ op: 'write', id, writerProcs, prepared: this.use(prepared), header, chunks: sent, hash }),
      { transfer },
    );
  }

  /** Kills a waiting wrapper or writer and waits (at most 2 s) until it is gone, so it cannot join a cgroup after a sweep. */
  async drop(ref: PreparedRef | null): Promise<void> {
    if (!ref || !ref.alive || !this.worker) return;
    ref.alive = false;
    const gone = new Promise<void>((resolve) => this.drops.set(ref.id, resolve));
    // After its own start (messages keep their order): a start still waiting is never made, one made is killed.
    this.worker.postMessage({ op: 'drop', id: ref.id, key: ref.key } satisfies ToThread);
    await within(gone, 2000).catch(() => undefined);
    this.drops.delete(ref.id);
  }

  /** Has a waiting wrapper set its sandbox up now, before its exec arrives (exec.ts prepareExec). */
  setUpAhead(ref: PreparedRef): void {
    if (!ref.alive || !this.worker) return;
    // Queued after its own start (the same tenant's requests keep their order).
    this.worker.postMessage({ op: 'start', id: ref.id, key: ref.key } satisfies ToThread);
  }

  /** One exec, run by the exec thread (with the prepared wrapper when it is still alive). */
  run(key: string, p: RunParams): Promise<ExecOutcome> {
    const { prepared, observe, onStart, ...params } = p;
    return this.request<ExecOutcome>(
      key,
      (id) => {
        onStart?.(() => this.worker?.postMessage({ op: 'abort', id } satisfies ToThread));
        return { op: 'run', id, prepared: this.use(prepared), params, observe: observe !== undefined };
      },
      { ...(observe ? { observe } : {}) },
    );
  }

  /** Creates a capsule's egress namespace and relay (egress.ts) in the exec thread. */
  attachEgress(key: string, netns: string, proxySocket: string): Promise<EgressState> {
    return this.request<EgressState>(key, (id) => ({ op: 'attach', id, netns, proxySocket }));
  }

  /** Removes a capsule's relay and namespace in the exec thread; here if the thread cannot (cleanup must happen). */
  detachEgress(key: string, state: EgressState): Promise<EgressDetached> {
    return this.request<EgressDetached>(key, (id) => ({ op: 'detach', id, state })).catch(() => detachEgress(state));
  }

  /** Posts one request to the thread; its `done` or `failed` answer settles the promise. */
  private request<T>(
    key: string,
    message: (id: number) => Request,
    extra: { observe?: (o: SandboxObservation) => void; transfer?: ArrayBuffer[] } = {},
  ): Promise<T> {
    const id = this.nextId++;
    const w = this.thread();
    return new Promise<T>((resolve, reject) => {
      this.runs.set(id, { resolve, reject, ...(extra.observe ? { observe: extra.observe } : {}) });
      w.postMessage({ ...message(id), key, light: this.isLight(key) } satisfies ToThread, extra.transfer);
    });
  }

  /** Stops the thread, and first its spawner process (spawner.ts), waiting at most 2 s for it. */
  async close(): Promise<void> {
    const w = this.worker;
    if (!w) return;
    const closed = new Promise<void>((resolve) => (this.closing = resolve));
    w.postMessage({ op: 'close' } satisfies ToThread);
    await within(closed, 2000).catch(() => undefined);
    this.worker = null;
    await w.terminate();
  }
}
