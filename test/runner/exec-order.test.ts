// The exec thread's order (sandbox-runner/exec-order.ts): a light tenant's
// request first, starts ahead of time only while the spawner has room, each
// tenant's own requests in order.
import t from 'tap';
import { FairQueue } from '../../sandbox-runner/fair-queue.js';
import { MAX_STARTING, nextRequest } from '../../sandbox-runner/exec-order.js';

interface Msg {
  op: string;
  name: string;
  light?: boolean;
}

function queue(): FairQueue<Msg> {
  const q = new FairQueue<Msg>();
  for (let i = 0; i < 3; i++) q.push('a', { op: 'prepare', name: `a-prepare${i}` });
  q.push('b', { op: 'run', name: 'b-run' });
  q.push('victim', { op: 'wprepare', name: 'v-wprepare', light: true });
  q.push('victim', { op: 'write', name: 'v-write', light: true });
  return q;
}

const names = (q: FairQueue<Msg>, starting: number, n: number): string[] => {
  const out: string[] = [];
  for (let i = 0; i < n; i++) {
    const m = nextRequest(q, starting);
    if (!m) break;
    out.push(m.name);
  }
  return out;
};

t.test('with room at the spawner: the light tenant first, then round robin', async (t) => {
  t.same(names(queue(), 0, 10), ['v-wprepare', 'v-write', 'a-prepare0', 'b-run', 'a-prepare1', 'a-prepare2']);
});

t.test('with the spawner full: no start goes, other requests do, in each tenant order', async (t) => {
  const q = queue();
  t.same(names(q, MAX_STARTING, 10), ['b-run'], "the victim's write waits behind its own start; a's starts wait");
  t.same(names(q, MAX_STARTING - 1, 10).slice(0, 2), ['v-wprepare', 'v-write'], 'room again: the light tenant first');
});
