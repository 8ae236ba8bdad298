// The exec thread (see exec-host.ts): starts wrappers, runs execs, reports back.
import { parentPort } from 'node:worker_threads';
import { RunnerError } from '../shared/runner-error.js';
import { systemClock } from './clock.js';
import { prepareExec, runExec, type Prepared } from './exec.js';
import { prepareWriter, runWriter, type PreparedWriter } from './charged.js';
import type { FromThread, ToThread } from './exec-host.js';

const port = parentPort!;
const post = (m: FromThread): void => port.postMessage(m);
const prepared = new Map<number, Prepared>();
const writers = new Map<number, PreparedWriter>();
const aborts = new Map<number, () => void>();
/** Aborts that arrived before their exec had started. */
const aborted = new Set<number>();

port.on('message', (m: ToThread) => {
  switch (m.op) {
    case 'prepare': {
      let p: Prepared;
      try {
        p = prepareExec(m.procs, m.argFile, m.seccompPath);
      } catch {
        post({ op: 'exited', id: m.id }); // the exec starts a wrapper itself
        return;
      }
      prepared.set(m.id, p);
      p.child.once('exit', () => {
        if (prepared.get(m.id) === p) prepared.delete(m.id);
        post({ op: 'exited', id: m.id });
      });
      return;
    }
    case 'drop': {
      const p = prepared.get(m.id);
      prepared.delete(m.id);
      if (!p || !p.alive) {
        post({ op: 'dropped', id: m.id });
        return;
      }
      p.child.once('exit', () => post({ op: 'dropped', id: m.id }));
      p.child.kill('SIGKILL');
      return;
    }
    case 'wprepare': {
      let w: PreparedWriter;
      try {
        w = prepareWriter(m.writerProcs);
      } catch {
        post({ op: 'exited', id: m.id }); // the write starts one itself
        return;
      }
      writers.set(m.id, w);
      w.child.once('exit', () => {
        if (writers.get(m.id) === w) writers.delete(m.id);
        post({ op: 'exited', id: m.id });
      });
      return;
    }
    case 'wdrop': {
      const w = writers.get(m.id);
      writers.delete(m.id);
      if (!w || !w.alive) {
        post({ op: 'dropped', id: m.id });
        return;
      }
      void w.done.then(() => post({ op: 'dropped', id: m.id }));
      w.child.kill('SIGKILL');
      return;
    }
    case 'write': {
      const w = m.prepared === null ? null : (writers.get(m.prepared) ?? null);
      if (m.prepared !== null) writers.delete(m.prepared);
      let run: ReturnType<typeof runWriter>;
      try {
        run = runWriter(m.writerProcs, w, m.header, m.chunks, m.hash);
      } catch (e) {
        run = Promise.reject(e);
      }
      run
        .then(
          (result) => post({ op: 'written', id: m.id, result }),
          (e: unknown) =>
            post({ op: 'failed', id: m.id, code: null, message: e instanceof Error ? e.message : String(e) }),
        )
        .finally(() => {
          // Customer bytes: this thread's copy is zeroed once written.
          for (const c of m.chunks) c.fill(0);
        });
      return;
    }
    case 'abort':
      if (aborts.has(m.id)) aborts.get(m.id)!();
      else aborted.add(m.id);
      return;
    case 'run': {
      const p = m.prepared === null ? null : (prepared.get(m.prepared) ?? null);
      if (m.prepared !== null) prepared.delete(m.prepared);
      runExec({
        ...m.params,
        prepared: p,
        clock: systemClock,
        ...(m.observe ? { observe: (o) => post({ op: 'observe', id: m.id, o }) } : {}),
        onStart: (abort) => {
          aborts.set(m.id, abort);
          if (aborted.delete(m.id)) abort();
        },
      })
        .then(
          (outcome) => post({ op: 'done', id: m.id, outcome }),
          (e: unknown) =>
            post({
              op: 'failed',
              id: m.id,
              code: e instanceof RunnerError ? e.code : null,
              message: e instanceof Error ? e.message : String(e),
            }),
        )
        .finally(() => {
          aborts.delete(m.id);
          aborted.delete(m.id);
        });
    }
  }
});
