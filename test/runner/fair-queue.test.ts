// The exec thread's request order (sandbox-runner/fair-queue.ts): round robin
// by tenant, each tenant's own requests in order.
import t from 'tap';
import { FairQueue } from '../../sandbox-runner/fair-queue.js';

const drain = <T>(q: FairQueue<T>): T[] => {
  const out: T[] = [];
  for (let x = q.shift(); x !== undefined; x = q.shift()) out.push(x);
  return out;
};

t.test('a tenant with one request waits behind one request of each other tenant', async (t) => {
  const q = new FairQueue<string>();
  for (let i = 0; i < 20; i++) q.push('a', `a${i}`);
  for (let i = 0; i < 3; i++) q.push('b', `b${i}`);
  q.push('victim', 'v0');
  const order = drain(q);
  t.equal(order.indexOf('v0'), 2, 'served third: after a0 and b0, not after 23 requests');
  t.same(
    order.filter((x) => x.startsWith('a')),
    Array.from({ length: 20 }, (_, i) => `a${i}`),
    "a tenant's own requests keep their order",
  );
  t.same(order.slice(0, 8), ['a0', 'b0', 'v0', 'a1', 'b1', 'a2', 'b2', 'a3']);
  t.equal(q.size, 0);
  t.equal(q.shift(), undefined);
});

t.test('a tenant that comes back after being served joins the end of the round', async (t) => {
  const q = new FairQueue<string>();
  q.push('a', 'a0');
  q.push('a', 'a1');
  q.push('b', 'b0');
  t.equal(q.shift(), 'a0');
  q.push('c', 'c0');
  t.same(drain(q), ['b0', 'a1', 'c0']);
});

t.test('a waiting request can be taken out; the others keep their places and turns', async (t) => {
  const q = new FairQueue<string>();
  q.push('a', 'a0');
  q.push('a', 'a1');
  q.push('b', 'b0');
  t.equal(
    q.remove('a', (x) => x === 'a1'),
    'a1',
  );
  t.equal(
    q.remove('a', (x) => x === 'a1'),
    undefined,
    'gone once taken',
  );
  t.equal(
    q.remove('c', () => true),
    undefined,
    'an unknown key has nothing',
  );
  t.equal(
    q.remove('b', (x) => x === 'b0'),
    'b0',
  );
  t.equal(q.size, 1, "b's empty queue left the round");
  q.push('b', 'b1');
  t.same(drain(q), ['a0', 'b1']);
});

t.test(
  'shift(match): the first tenant in the round whose next request matches; the others keep their turn',
  async (t) => {
    const q = new FairQueue<string>();
    q.push('a', 'start-a0');
    q.push('a', 'run-a1');
    q.push('b', 'start-b0');
    q.push('victim', 'run-v0');
    q.push('c', 'run-c0');
    const noStart = (x: string): boolean => !x.startsWith('start');
    t.equal(q.shift(noStart), 'run-v0', "a's and b's next requests are starts: the victim's run goes");
    t.equal(q.shift(noStart), 'run-c0');
    t.equal(q.shift(noStart), undefined, 'every tenant left waits with a start first (its order kept)');
    t.same(drain(q), ['start-a0', 'start-b0', 'run-a1'], 'a and b kept their places in the round');
  },
);
