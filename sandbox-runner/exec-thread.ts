// The exec thread (see exec-host.ts): starts wrappers, runs execs, reports back.
import { parentPort } from 'node:worker_threads';
import { ownBuffer } from '../shared/node/own-buffer.js';
import { RunnerError } from '../shared/runner-error.js';
import { systemClock } from './clock.js';
import { prepareExec, runExec, setUpWhenJoined, type Prepared } from './exec.js';
import { prepareWriter, runWriter, type PreparedWriter } from './charged.js';
import { attachEgress, detachEgress } from './egress.js';
import type { FromThread, ThreadValue, ToThread } from './exec-host.js';
import { FairQueue } from './fair-queue.js';
import { nextRequest } from './exec-order.js';
import { spawner } from './spawner.js';

const port = parentPort!;
spawner.warm();
const post = (m: FromThread): void => port.postMessage(m);
/** Processes started ahead of time (exec wrappers, writers), by the id the serving thread gave them. */
const held = new Map<number, Prepared | PreparedWriter>();
const aborts = new Map<number, () => void>();
/** Aborts that arrived before their exec had started. */
const aborted = new Set<number>();

/** Starts a process ahead of time; if it cannot start, the exec or write starts one itself. */
function hold(id: number, start: () => Prepared | PreparedWriter): void {
  let h: Prepared | PreparedWriter;
  try {
    h = start();
  } catch {
    post({ op: 'exited', id });
    return;
  }
  held.set(id, h);
  h.child.once('exit', () => {
    if (held.get(id) === h) held.delete(id);
    post({ op: 'exited', id });
  });
}

/** The held process for a run or write (gone from the map: it is used once). */
function take<T extends Prepared | PreparedWriter>(id: number | null): T | null {
  if (id === null) return null;
  const h = held.get(id) ?? null;
  held.delete(id);
  return h as T | null;
}

/** An exec's output bytes move to the serving thread rather than being copied there. */
function transferOutput(value: ThreadValue): ArrayBuffer[] {
  if (!('output' in value)) return [];
  const b = (value.output.bytes = ownBuffer(value.output.bytes));
  return [b.buffer as ArrayBuffer];
}

/** Posts a request's outcome, or its failure (a RunnerError keeps its code). */
function reply(id: number, work: Promise<ThreadValue>): Promise<unknown> {
  return work.then(
    (value) => port.postMessage({ op: 'done', id, value } satisfies FromThread, transferOutput(value)),
    (e: unknown) =>
      post({
        op: 'failed',
        id,
        code: e instanceof RunnerError ? e.code : null,
        message: e instanceof Error ? e.message : String(e),
      }),
  );
}

// Requests are handed on one per turn of the loop, picked by tenant: one
// tenant's backlog of process starts never holds another's exec. Aborts and
// drops never wait.
const waiting = new FairQueue<ToThread>();
let draining = false;

// The spawner starts one process at a time, in the order asked: handed on as
// they came, twenty capsules' starts queued there (measured: up to 33, 300 ms)
// and a light tenant's writer waited behind all of them. Held here instead
// (exec-order.ts), they are picked by tenant like everything else.
function drain(): void {
  const m = nextRequest(waiting, spawner.starting);
  if (m === undefined) {
    draining = false;
    return;
  }
  handle(m);
  // One request per turn of the loop: messages that arrived meanwhile are queued first, then picked fairly.
  setImmediate(drain);
}

function wake(): void {
  if (draining || waiting.size === 0) return;
  draining = true;
  setImmediate(drain);
}

// A start answered: a held one may go.
spawner.onStartAnswered = wake;

port.on('message', (m: ToThread) => {
  if (m.op === 'abort') return handle(m);
  if (m.op === 'close') {
    void spawner.close().then(() => post({ op: 'closed' }));
    return;
  }
  if (m.op === 'drop') {
    // A process whose start still waits its turn is never started: dropping it costs nothing.
    // Otherwise its start was handled (messages arrive in order): kill it now, a destroy waits on it.
    if (waiting.remove(m.key, (w) => (w.op === 'prepare' || w.op === 'wprepare') && w.id === m.id)) {
      post({ op: 'exited', id: m.id });
      post({ op: 'dropped', id: m.id });
    } else handle(m);
    return;
  }
  waiting.push(m.key, m);
  wake();
});

function handle(m: ToThread): void {
  switch (m.op) {
    case 'prepare':
      hold(m.id, () => prepareExec(m.cgroup, m.quick, m.spec, m.seccompPath, m.ahead, m.look));
      return;
    case 'wprepare':
      hold(m.id, () => prepareWriter(m.writerProcs));
      return;
    case 'drop': {
      const h = take(m.id);
      if (!h || !h.alive) {
        post({ op: 'dropped', id: m.id });
        return;
      }
      h.child.once('exit', () => post({ op: 'dropped', id: m.id }));
      h.child.kill('SIGKILL');
      return;
    }
    case 'write':
      reply(m.id, runWriter(m.writerProcs, take<PreparedWriter>(m.prepared), m.header, m.chunks, m.hash)).finally(
        () => {
          // Customer bytes: this thread's copy is zeroed once written.
          for (const c of m.chunks) c.fill(0);
        },
      );
      return;
    case 'attach':
      reply(m.id, attachEgress(m.netns, m.proxySocket));
      return;
    case 'detach':
      reply(m.id, detachEgress(m.state));
      return;
    case 'start': {
      // Still held (not yet taken by its exec, not dropped): set it up now.
      const h = held.get(m.id);
      if (h && 'joined' in h) setUpWhenJoined(h);
      return;
    }
    case 'abort':
      if (aborts.has(m.id)) aborts.get(m.id)!();
      else aborted.add(m.id);
      return;
    case 'run': {
      const p = take<Prepared>(m.prepared);
      reply(
        m.id,
        runExec({
          ...m.params,
          prepared: p,
          clock: systemClock,
          ...(m.observe ? { observe: (o) => post({ op: 'observe', id: m.id, o }) } : {}),
          onStart: (abort) => {
            aborts.set(m.id, abort);
            if (aborted.delete(m.id)) abort();
          },
        }),
      ).finally(() => {
        aborts.delete(m.id);
        aborted.delete(m.id);
      });
    }
  }
}
