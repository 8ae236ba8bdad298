// FairGate on an injected clock and timer: who waits, who is let in first,
// and every bound that keeps it from holding the service idle.
import t from 'tap';
import type { FairGateConfig } from '../../control-plane/config.js';
import { FairGate, type Release } from '../../control-plane/http/fair-gate.js';

class FakeTime {
  now = 0;
  private timers: { at: number; f: () => void; live: boolean }[] = [];
  timer = (ms: number, f: () => void): (() => void) => {
    const e = { at: this.now + ms, f, live: true };
    this.timers.push(e);
    return () => {
      e.live = false;
    };
  };
  /** Moves the clock on, firing due timers in order (and the promise jobs they start). */
  async advance(ms: number): Promise<void> {
    const end = this.now + ms;
    for (;;) {
      const due = this.timers.filter((e) => e.live && e.at <= end).sort((a, b) => a.at - b.at)[0];
      if (!due) break;
      this.now = Math.max(this.now, due.at);
      due.live = false;
      due.f();
      await settle();
    }
    this.now = end;
    await settle();
  }
}

const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

const OPTS: FairGateConfig = {
  heavySlots: 1,
  heavyLoad: 1.5,
  leaseMs: 1000,
  halfLifeMs: 2000,
  lightWindowMs: 500,
  maxWaitMs: 5000,
};

function gate(o: Partial<FairGateConfig> = {}): { g: FairGate; time: FakeTime } {
  const time = new FakeTime();
  return { g: new FairGate(() => time.now, { ...OPTS, ...o }, time.timer), time };
}

/** Makes accounts heavy: three requests of `account` (and n of each in `more`) held for 2 s, about 0.7 load each. */
async function makeHeavy(g: FairGate, time: FakeTime, account: string, ...more: [string, number][]): Promise<void> {
  const rs: Release[] = [];
  for (const [a, n] of [[account, 3] as [string, number], ...more])
    for (let i = 0; i < n; i++) rs.push(await g.enter(a));
  await time.advance(2000);
  for (const r of rs) r();
}

/** enter() whose admission is observable without awaiting it. */
function tracked(g: FairGate, account: string): { admitted: () => Release | null } {
  let rel: Release | null = null;
  void g.enter(account).then((r) => (rel = r));
  return { admitted: () => rel };
}

t.test('load: time from arrival to answer, requests not answered included, halved each half-life', async (t) => {
  const { g, time } = gate();
  t.equal(g.load('a'), 0);
  const r = await g.enter('a');
  await time.advance(1000);
  t.ok(Math.abs(g.load('a') - 1000 / (2000 / Math.LN2)) < 1e-9, 'not answered yet: its time so far counts');
  r();
  const at = g.load('a');
  await time.advance(2000);
  t.ok(Math.abs(g.load('a') - at / 2) < 1e-9, 'halved after one half-life');
});

t.test('heavy accounts take turns while a light one is active; the light one never waits', async (t) => {
  const { g, time } = gate();
  await makeHeavy(g, time, 'heavy');
  t.ok(g.load('heavy') >= 1.5, `heavy's load ${g.load('heavy')}`);
  (await g.enter('light'))(); // the light account is active
  const first = tracked(g, 'heavy');
  const second = tracked(g, 'heavy');
  await settle();
  t.ok(first.admitted(), 'the first heavy request takes the one slot');
  t.equal(second.admitted(), null, 'the second waits');
  t.equal(g.queued, 1);
  const light = tracked(g, 'light');
  await settle();
  t.ok(light.admitted(), 'a light request is admitted although the slot is taken');
  first.admitted()!();
  await settle();
  t.ok(second.admitted(), 'the freed slot goes to the waiter');
  t.equal(g.queued, 0);
});

t.test('held back, a heavy account stays heavy: its waiting requests are load too', async (t) => {
  const { g, time } = gate({ leaseMs: 100_000, maxWaitMs: 100_000 });
  await makeHeavy(g, time, 'heavy');
  (await g.enter('light'))();
  const rs = [tracked(g, 'heavy'), tracked(g, 'heavy'), tracked(g, 'heavy')];
  for (let i = 0; i < 30; i++) {
    await time.advance(200);
    (await g.enter('light'))();
  }
  t.ok(g.load('heavy') >= 1.5, `load ${g.load('heavy').toFixed(2)} after 6 s held back`);
  t.equal(rs.filter((r) => r.admitted()).length, 1, 'still one at a time');
  t.equal(g.load('light') < 1.5, true, 'the light account stayed light');
});

t.test('a freed slot goes to the least loaded waiting account', async (t) => {
  const { g, time } = gate();
  await makeHeavy(g, time, 'small', ['big', 6]);
  t.ok(g.load('big') > g.load('small') && g.load('small') >= 1.5, 'both heavy, big the more loaded');
  (await g.enter('light'))();
  const holder = tracked(g, 'small');
  await settle();
  const big = tracked(g, 'big');
  const small = tracked(g, 'small');
  await settle();
  t.equal(big.admitted(), null);
  t.equal(small.admitted(), null);
  holder.admitted()!();
  await settle();
  t.ok(small.admitted(), 'the less loaded account goes first, although it asked later');
  t.equal(big.admitted(), null);
});

t.test('alone, a heavy account is not held back (work conserving)', async (t) => {
  const { g, time } = gate();
  await makeHeavy(g, time, 'heavy');
  await time.advance(600); // no light account within the window
  const rs = [tracked(g, 'heavy'), tracked(g, 'heavy'), tracked(g, 'heavy')];
  await settle();
  t.ok(
    rs.every((r) => r.admitted()),
    'three at once with one slot',
  );
});

t.test('waiters are let in once the light accounts go quiet', async (t) => {
  const { g, time } = gate();
  await makeHeavy(g, time, 'heavy');
  (await g.enter('light'))();
  const holder = tracked(g, 'heavy');
  const waiter = tracked(g, 'heavy');
  await settle();
  t.ok(holder.admitted());
  t.equal(waiter.admitted(), null);
  await time.advance(499);
  t.equal(waiter.admitted(), null, 'still within the light window');
  await time.advance(2);
  t.ok(waiter.admitted(), 'let in when the window closed, the slot still held');
});

t.test('a slot is given back at the lease; its request still adds load until it ends', async (t) => {
  const { g, time } = gate({ lightWindowMs: 100_000, leaseMs: 1000 });
  await makeHeavy(g, time, 'heavy');
  (await g.enter('light'))();
  const long = tracked(g, 'heavy');
  const next = tracked(g, 'heavy');
  await settle();
  t.ok(long.admitted());
  await time.advance(999);
  t.equal(next.admitted(), null);
  await time.advance(1);
  t.ok(next.admitted(), 'the long request gave its slot back at the lease');
  const before = g.load('heavy');
  await time.advance(100);
  t.ok(g.load('heavy') > before * 2 ** (-100 / 2000), 'past its lease, its time still counts');
  long.admitted()!();
  next.admitted()!();
});

t.test('a waiter is served after at most maxWaitMs, slots or not', async (t) => {
  const { g, time } = gate({ lightWindowMs: 100_000, leaseMs: 100_000, maxWaitMs: 5000 });
  await makeHeavy(g, time, 'heavy');
  (await g.enter('light'))();
  const holder = tracked(g, 'heavy');
  const stuck = tracked(g, 'heavy');
  await settle();
  t.ok(holder.admitted());
  await time.advance(4999);
  t.equal(stuck.admitted(), null);
  await time.advance(1);
  t.ok(stuck.admitted(), 'served at maxWait');
  t.equal(g.queued, 0);
  holder.admitted()!();
  stuck.admitted()!();
});

t.test('heavySlots 0 turns the gate off', async (t) => {
  const { g, time } = gate({ heavySlots: 0 });
  await makeHeavy(g, time, 'heavy');
  (await g.enter('light'))();
  const rs = [tracked(g, 'heavy'), tracked(g, 'heavy')];
  await settle();
  t.ok(rs.every((r) => r.admitted()));
  t.equal(g.load('heavy'), 0, 'nothing is accounted');
});

t.test('a release called twice counts once', async (t) => {
  const { g, time } = gate();
  const r = await g.enter('a');
  await time.advance(100);
  r();
  const once = g.load('a');
  r();
  t.equal(g.load('a'), once);
});
