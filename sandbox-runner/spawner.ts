// Process starts from a small process. fork() copies the page tables of the
// process that calls it: from the runner, which holds 300-600 MB while busy
// capsules upload and print, a start cost 12-23 ms on an idle host (measured:
// 3.5 ms per 100 MB resident) and 45 ms while capsules kept both cores busy,
// most of the exec thread's time. The exec thread therefore asks one
// pre-started helper process (spawner-process.ts, ~50 MB, ~1 ms a fork) to
// start its wrappers, writers and egress helpers; it hands back the child's pipes
// over its IPC channel (they are socketpairs, so they pass as handles) and
// reports the exit status. RemoteChild stands for such a child here.
import { spawn, type ChildProcess } from 'node:child_process';
import { EventEmitter } from 'node:events';
import type { Socket } from 'node:net';
import { fileURLToPath } from 'node:url';

const PROCESS_PATH = fileURLToPath(new URL('./spawner-process.js', import.meta.url));

/** One stdio entry: nothing, a pipe handed back as a socket, or a file the helper opens read-only. */
export type StdioEntry = 'ignore' | 'pipe' | { open: string };

export interface SpawnOptions {
  stdio: StdioEntry[];
  env: Record<string, string>;
  /** Runs as this uid and gid (supplementary groups dropped, as libuv does). */
  uid?: number;
  /** A process group of its own (the egress relay). */
  detached?: boolean;
}

/** Runner -> helper. */
export type SpawnerRequest =
  | ({ op: 'spawn'; id: number; file: string; args: string[] } & SpawnOptions)
  | { op: 'kill'; id: number; signal: NodeJS.Signals };

/** Helper -> runner. Each `pipe` message carries one socket; `exit` comes after every pipe. */
export type SpawnerReply =
  | { op: 'spawned'; id: number; pid: number; pipes: number[] }
  | { op: 'pipe'; id: number; fd: number }
  | { op: 'failed'; id: number; message: string }
  | { op: 'exit'; id: number; code: number | null; signal: NodeJS.Signals | null };

/**
 * A child started by the helper, with the events of a ChildProcess the runner uses: `exit` and
 * `close` (code, signal; close once every pipe has closed too) and `error`. Its pipes arrive after
 * it is created: use them once `ready` resolves (with its pid).
 */
export class RemoteChild extends EventEmitter {
  pid: number | undefined;
  readonly stdio: (Socket | null)[] = [];
  exitCode: number | null = null;
  readonly ready: Promise<number>;
  /** Settles with the `close` event's (code, signal), even for a listener that comes late. */
  readonly closed: Promise<[number | null, NodeJS.Signals | null]>;
  private exited = false;
  private exitStatus: [number | null, NodeJS.Signals | null] = [null, null];
  /** Pipes received, and those of them still open. */
  private received = 0;
  private open = 0;
  private expected = -1;
  private settle!: { resolve: (pid: number) => void; reject: (e: Error) => void };

  constructor(
    readonly id: number,
    private readonly sendKill: (id: number, signal: NodeJS.Signals) => void,
  ) {
    super();
    this.ready = new Promise((resolve, reject) => (this.settle = { resolve, reject }));
    this.ready.catch(() => undefined);
    this.closed = new Promise((resolve) => this.once('close', (code, signal) => resolve([code, signal])));
  }

  get stdin(): Socket | null {
    return this.stdio[0] ?? null;
  }
  get stdout(): Socket | null {
    return this.stdio[1] ?? null;
  }
  get stderr(): Socket | null {
    return this.stdio[2] ?? null;
  }

  kill(signal: NodeJS.Signals = 'SIGTERM'): void {
    if (!this.exited) this.sendKill(this.id, signal);
  }

  /** @internal The helper's replies for this child. */
  onReply(m: SpawnerReply, handle: unknown): void {
    switch (m.op) {
      case 'spawned':
        this.pid = m.pid;
        this.expected = m.pipes.length;
        this.readyIfComplete();
        return;
      case 'pipe': {
        const s = handle as Socket | undefined;
        if (!s) {
          // Cannot happen while the helper stops its reads (spawner-process.ts); if it does, the start failed.
          this.kill('SIGKILL');
          this.settle.reject(new Error(`pipe ${m.fd} was not passed`));
          return;
        }
        this.stdio[m.fd] = s;
        this.received++;
        this.open++;
        s.on('error', () => undefined);
        s.once('close', () => {
          this.open--;
          this.closeIfDone();
        });
        this.readyIfComplete();
        return;
      }
      case 'failed': {
        const e = new Error(m.message);
        this.settle.reject(e);
        if (this.listenerCount('error') > 0) this.emit('error', e);
        this.onExit(null, null);
        return;
      }
      case 'exit':
        this.onExit(m.code, m.signal);
    }
  }

  /** @internal */
  onExit(code: number | null, signal: NodeJS.Signals | null): void {
    if (this.exited) return;
    this.exited = true;
    this.exitCode = code;
    this.exitStatus = [code, signal];
    this.settle.reject(new Error('process exited before it was ready'));
    this.emit('exit', code, signal);
    // As ChildProcess does: pipes nobody reads are drained so that they can close.
    for (const s of this.stdio) if (s && s.readableFlowing !== true) s.resume();
    this.closeIfDone();
  }

  private readyIfComplete(): void {
    if (this.pid !== undefined && this.received === this.expected) this.settle.resolve(this.pid);
  }

  private closeIfDone(): void {
    if (this.exited && this.open === 0) {
      const [code, signal] = this.exitStatus;
      // Once: the pipes' last close and the exit may both land here.
      this.exitStatus = [null, null];
      this.open = -1;
      this.emit('close', code, signal);
    }
  }
}

/** The runner's end of the helper: starts it when first needed and again if it dies. */
export class Spawner {
  private helper: ChildProcess | null = null;
  private nextId = 1;
  private readonly children = new Map<number, RemoteChild>();
  /** Starts sent to the helper and not answered yet (it starts one process at a time). */
  private readonly pending = new Set<number>();
  /** Called each time the helper answers a start (started or failed). */
  onStartAnswered: (() => void) | null = null;

  /** How many starts the helper has been asked for and not answered yet. */
  get starting(): number {
    return this.pending.size;
  }

  private answered(id: number): void {
    if (this.pending.delete(id)) this.onStartAnswered?.();
  }

  /** Starts the helper now, so that the first exec does not wait for a Node start. */
  warm(): void {
    this.process();
  }

  private process(): ChildProcess {
    if (this.helper) return this.helper;
    // Killed by the kernel when the thread that started it ends (the runner's death included), so it
    // never outlives the runner in the runner's cgroup leaf.
    const h = spawn(
      'setpriv',
      ['--pdeathsig', 'KILL', '--', process.execPath, '--max-old-space-size=64', PROCESS_PATH],
      {
        stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
        env: { PATH: '/usr/sbin:/usr/bin:/sbin:/bin' },
        serialization: 'json',
      },
    );
    // The helper keeps nobody alive by itself; its channel does while a child is outstanding (held()).
    h.unref();
    h.channel?.unref();
    h.on('message', (m: SpawnerReply, handle: unknown) => {
      const c = this.children.get(m.id);
      if (m.op === 'spawned' || m.op === 'failed') this.answered(m.id);
      if (m.op === 'exit' || m.op === 'failed') {
        this.children.delete(m.id);
        this.held();
      }
      c?.onReply(m, handle);
    });
    const lost = (): void => {
      if (this.helper !== h) return;
      this.helper = null;
      // Its children live on without anyone to report their exit: end them, and say so.
      for (const c of this.children.values()) {
        if (c.pid !== undefined) {
          try {
            process.kill(c.pid, 'SIGKILL');
          } catch {
            /* gone */
          }
        }
        c.onReply({ op: 'failed', id: c.id, message: 'the spawner process exited' }, undefined);
      }
      this.children.clear();
      for (const id of [...this.pending]) this.answered(id);
    };
    h.on('error', lost);
    h.on('exit', lost);
    this.helper = h;
    return h;
  }

  spawn(file: string, args: string[], options: SpawnOptions): RemoteChild {
    const id = this.nextId++;
    const child = new RemoteChild(id, (cid, signal) => this.send({ op: 'kill', id: cid, signal }));
    this.children.set(id, child);
    this.pending.add(id);
    this.send({ op: 'spawn', id, file, args, ...options });
    this.held();
    return child;
  }

  private held(): void {
    if (this.children.size > 0) this.helper?.channel?.ref();
    else this.helper?.channel?.unref();
  }

  private send(m: SpawnerRequest): void {
    const h = this.process();
    h.send(m, (e: Error | null) => {
      if (e && m.op === 'spawn') {
        this.answered(m.id);
        this.children.get(m.id)?.onReply({ op: 'failed', id: m.id, message: e.message }, null);
      }
    });
  }

  /** Stops the helper and waits until it is gone (it lives in the runner's cgroup leaf, removed at stop). */
  async close(): Promise<void> {
    const h = this.helper;
    this.helper = null;
    if (!h || h.exitCode !== null || h.signalCode !== null) return;
    const gone = new Promise((resolve) => h.once('exit', resolve));
    h.ref(); // until it is gone
    h.kill('SIGKILL');
    await gone;
  }
}

/** The exec thread's spawner (one per thread that starts sandbox processes). */
export const spawner = new Spawner();
