// The spawner helper (spawner.ts says why): starts processes on request and
// hands their pipes to the runner over the IPC channel, then their exit status.
import { spawn, type ChildProcess, type StdioOptions } from 'node:child_process';
import { closeSync, openSync } from 'node:fs';
import type { Socket } from 'node:net';
import type { SpawnerReply, SpawnerRequest } from './spawner.js';

const children = new Map<number, ChildProcess>();
const send = (m: SpawnerReply, handle?: Socket): void => {
  process.send!(m, handle);
};

// The runner is gone: so are the other ends of every pipe, and the children waiting on them exit.
process.on('disconnect', () => process.exit(0));

process.on('message', (m: SpawnerRequest) => {
  if (m.op === 'kill') {
    children.get(m.id)?.kill(m.signal);
    return;
  }
  const opened: number[] = [];
  let child: ChildProcess;
  try {
    const stdio: StdioOptions = m.stdio.map((e) => {
      if (typeof e === 'string') return e;
      const fd = openSync(e.open, 'r');
      opened.push(fd);
      return fd;
    });
    child = spawn(m.file, m.args, {
      stdio,
      env: m.env,
      ...(m.uid === undefined ? {} : { uid: m.uid, gid: m.uid }),
      ...(m.detached ? { detached: true } : {}),
    });
  } catch (e) {
    send({ op: 'failed', id: m.id, message: (e as Error).message });
    return;
  } finally {
    for (const fd of opened) closeSync(fd);
  }
  if (child.pid === undefined) {
    child.once('error', (e) => send({ op: 'failed', id: m.id, message: e.message }));
    return;
  }
  children.set(m.id, child);
  const pipes = m.stdio.flatMap((e, fd) => (e === 'pipe' ? [fd] : []));
  // WARNING: Node starts reading a child's pipes at once. Bytes read here would be lost, and an
  // end-of-file read here (a child that exits at once) would close the pipe before it is passed:
  // stop reading now, in the same tick, through the handle (no public API does).
  for (const fd of pipes) (child.stdio[fd] as unknown as { _handle?: { readStop(): void } })._handle?.readStop();
  send({ op: 'spawned', id: m.id, pid: child.pid, pipes });
  // Sent, the socket's handle closes here (keepOpen false).
  for (const fd of pipes) send({ op: 'pipe', id: m.id, fd }, child.stdio[fd] as Socket);
  child.on('error', () => undefined);
  child.once('exit', (code, signal) => {
    children.delete(m.id);
    send({ op: 'exit', id: m.id, code, signal });
  });
});
