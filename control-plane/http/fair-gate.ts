// Heavy tenants take turns; light tenants never wait. Each account's load is
// the time its requests have spent in the service lately, from arrival to
// answer (decaying by half every `halfLifeMs`, requests not yet answered
// included), in units of one request always outstanding. An account at or
// above `heavyLoad` is heavy: while a light account has been seen within
// `lightWindowMs`, heavy accounts together have at most `heavySlots` requests
// in service, the rest waiting (least loaded account first, at most
// `maxWaitMs`). So a tenant who saturates the node slows itself, not the
// light tenant beside it; alone, it is not held back.
//
// A heavy slot is held until its answer is written or for `leaseMs`,
// whichever comes first: an exec that runs for minutes or a slow upload
// gives its slot back after the lease, so the gate never holds the service idle.
import type { FairGateConfig } from '../config.js';

export type Release = () => void;
export type Timer = (ms: number, f: () => void) => () => void;

interface Waiter {
  admit: () => void;
  cancelWait: () => void;
}

interface Load {
  /** Decayed held milliseconds as of `at`. */
  ms: number;
  at: number;
  /** Requests not yet ended (in service or waiting) and the sum of their arrival times: their time so far counts too. */
  inflight: number;
  startSum: number;
}

const realTimer: Timer = (ms, f) => {
  const t = setTimeout(f, ms);
  t.unref();
  return () => clearTimeout(t);
};

export class FairGate {
  private heavyBusy = 0;
  private lastLight = -Infinity;
  private readonly loads = new Map<string, Load>();
  /** Per account, its waiting requests in arrival order (scanned by account, not by request); never an empty list. */
  private readonly waiting = new Map<string, Waiter[]>();
  private recheck: (() => void) | null = null;
  /** Milliseconds of counted time that make one request always outstanding, at the decay's steady state. */
  private readonly unitMs: number;

  constructor(
    private readonly now: () => number,
    private readonly o: FairGateConfig,
    private readonly timer: Timer = realTimer,
  ) {
    this.unitMs = o.halfLifeMs / Math.LN2;
  }

  /** Requests waiting for a heavy slot. */
  get queued(): number {
    let n = 0;
    for (const q of this.waiting.values()) n += q.length;
    return n;
  }

  /** The account's load now: requests outstanding on average lately. */
  load(account: string): number {
    const l = this.loads.get(account);
    if (!l) return 0;
    const t = this.now();
    return (this.decayed(l, t) + (l.inflight * t - l.startSum)) / this.unitMs;
  }

  /** Waits until `account` may be served; call the returned function when its request ends. */
  enter(account: string): Promise<Release> {
    if (this.o.heavySlots <= 0) return Promise.resolve(() => undefined);
    const t = this.now();
    const heavy = this.load(account) >= this.o.heavyLoad;
    // Counted from arrival: a heavy account held back keeps its load (waiting is demand too).
    const finish = this.count(account, t);
    if (!heavy) {
      this.lastLight = t;
      return Promise.resolve(finish);
    }
    if (this.heavyBusy < this.o.heavySlots || !this.lightActive(t)) return Promise.resolve(this.slot(finish));
    return new Promise((resolve) => {
      const w: Waiter = {
        admit: () => resolve(this.slot(finish)),
        // Bounded wait: past it the request is served anyway (a heavy tenant is slowed, never stopped).
        cancelWait: this.timer(this.o.maxWaitMs, () => {
          const q = this.waiting.get(account);
          const i = q ? q.indexOf(w) : -1;
          if (i < 0) return;
          q!.splice(i, 1);
          if (q!.length === 0) this.waiting.delete(account);
          w.admit();
        }),
      };
      const q = this.waiting.get(account);
      if (q) q.push(w);
      else this.waiting.set(account, [w]);
      this.scheduleRecheck();
    });
  }

  /** The time of the account's answered requests as of `t`, decayed. */
  private decayed(l: Load, t: number): number {
    return l.ms * 2 ** (-(t - l.at) / this.o.halfLifeMs);
  }

  private lightActive(t: number): boolean {
    return t - this.lastLight < this.o.lightWindowMs;
  }

  /** Counts one request of `account` from `start`; the returned function ends it (once). */
  private count(account: string, start: number): Release {
    let l = this.loads.get(account);
    if (!l) {
      if (this.loads.size >= 10_000) this.prune();
      this.loads.set(account, (l = { ms: 0, at: start, inflight: 0, startSum: 0 }));
    }
    l.inflight++;
    l.startSum += start;
    let done = false;
    return () => {
      if (done) return;
      done = true;
      const t = this.now();
      l.ms = this.decayed(l, t) + (t - start);
      l.at = t;
      l.inflight--;
      l.startSum -= start;
      if (l.inflight === 0 && l.ms < 1) this.loads.delete(account);
    };
  }

  /** Holds a heavy slot until the request ends or its lease is over. */
  private slot(finish: Release): Release {
    this.heavyBusy++;
    let held = true;
    const giveBack = (): void => {
      if (!held) return;
      held = false;
      this.heavyBusy--;
      this.next();
    };
    const cancelLease = this.timer(this.o.leaseMs, giveBack);
    return () => {
      finish();
      cancelLease();
      giveBack();
    };
  }

  /** Forgets accounts with nothing in service and a load that has decayed away. */
  private prune(): void {
    for (const [k, l] of this.loads) if (l.inflight === 0 && this.load(k) < 0.001) this.loads.delete(k);
  }

  /** Admits waiters, least loaded account first, while heavy slots are free or no light account is active. */
  private next(): void {
    const t = this.now();
    while (this.waiting.size > 0 && (this.heavyBusy < this.o.heavySlots || !this.lightActive(t))) {
      let best = '';
      let bestLoad = Infinity;
      for (const account of this.waiting.keys()) {
        const load = this.load(account);
        if (load < bestLoad) {
          best = account;
          bestLoad = load;
        }
      }
      const q = this.waiting.get(best)!;
      const w = q.shift()!;
      if (q.length === 0) this.waiting.delete(best);
      w.cancelWait();
      w.admit();
    }
    if (this.waiting.size > 0) this.scheduleRecheck();
  }

  /** Waiters are let in when the light accounts go quiet, not only when a slot frees. */
  private scheduleRecheck(): void {
    if (this.recheck) return;
    const wait = Math.max(1, this.lastLight + this.o.lightWindowMs - this.now());
    this.recheck = this.timer(wait, () => {
      this.recheck = null;
      this.next();
    });
  }
}
