// The exec thread (see exec-host.ts): starts wrappers, runs execs, reports back.
import { parentPort } from 'node:worker_threads';
import { RunnerError } from '../shared/runner-error.js';
import { systemClock } from './clock.js';
import { prepareExec, runExec, type Prepared } from './exec.js';
import type { FromThread, ToThread } from './exec-host.js';

const port = parentPort!;
const post = (m: FromThread): void => port.postMessage(m);
const prepared = new Map<number, Prepared>();
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
