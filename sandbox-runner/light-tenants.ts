// Which tenants have been light on CPU lately (their execs run in the quick
// lane, cgroup.ts). Each tenant's exec time decays by half every HALF_LIFE_MS:
// an ended exec counts the CPU time its processes used where the kernel
// accounts it (cgroup.ts cpuUsageMs), else its wall time; execs still running
// count with the wall time they have run so far. A tenant is light while that
// sum stays under BUDGET_MS: about a quarter of one CPU all the time. A
// lifecycle every 300 ms with a 20 ms command stays light; a tenant running
// CPU-heavy commands back to back is not (and one that turns CPU-bound
// mid-exec leaves the lane then).
//
// WARNING: wall time alone fed on itself: on a busy node a light tenant's
// commands waited longer for a CPU, their longer wall time made it heavy, and
// out of the lane they waited longer still (measured in the soak: the eight
// slowest victim execs, 376-658 ms, had all left the lane).
//
// Light is also earned and taken one exec at a time: a tenant is light only
// once an exec of its own has ended on this node (a tenant never seen is not
// trusted with the lane), and not while two of its execs run. Under
// the soak, twenty new capsules of five new accounts started fork and memory
// bombs in the lane at once (all light by time: none had run yet); the lane
// hit its CPU cap in 80 of its first 211 periods, and every light tenant's
// processes waited out each one.

import type { Clock } from './clock.js';

const HALF_LIFE_MS = 2000;
/** A quarter of the decayed window (HALF_LIFE_MS / ln 2, about 2.9 s). */
const BUDGET_MS = 700;
/** Tenants remembered as seen after their time has decayed away (oldest forgotten first). */
const KNOWN_MAX = 10_000;

interface Usage {
  /** Decayed exec milliseconds as of `at`. */
  ms: number;
  at: number;
  /** Start times of execs still running. */
  running: Set<{ since: number }>;
}

export class LightTenants {
  private readonly usage = new Map<string, Usage>();
  /** Tenants with an exec ended on this node, in order of their last one (oldest first). */
  private readonly known = new Set<string>();

  constructor(private readonly clock: Pick<Clock, 'monotonicMs'>) {}

  /** Whether `key` is light now; while one of its execs runs, only that one is (ask after start()). */
  isLight(key: string): boolean {
    if (!this.known.has(key)) return false;
    const u = this.usage.get(key);
    if (!u) return true;
    if (u.running.size > 1) return false;
    const now = this.clock.monotonicMs();
    let ms = this.decayed(u, now);
    for (const r of u.running) ms += now - r.since;
    return ms < BUDGET_MS;
  }

  /**
   * An exec of `key` starts; the returned function ends it and adds its time then: `cpuMs`, the
   * CPU time it used, when known, else the wall time since it started.
   */
  start(key: string): (cpuMs?: number | null) => void {
    const now = this.clock.monotonicMs();
    let u = this.usage.get(key);
    if (!u) this.usage.set(key, (u = { ms: 0, at: now, running: new Set() }));
    const run = { since: now };
    u.running.add(run);
    return (cpuMs) => {
      if (!u.running.delete(run)) return;
      const end = this.clock.monotonicMs();
      const used = cpuMs != null && Number.isFinite(cpuMs) && cpuMs >= 0 ? cpuMs : end - run.since;
      u.ms = this.decayed(u, end) + used;
      u.at = end;
      this.known.delete(key); // re-added last: the set stays in order of last use
      this.known.add(key);
      if (this.known.size > KNOWN_MAX) this.known.delete(this.known.values().next().value!);
      this.prune(end);
    };
  }

  /** Tenants whose time has decayed away and that run nothing are forgotten (the map stays bounded by active tenants). */
  private prune(now: number): void {
    for (const [key, u] of this.usage) if (u.running.size === 0 && this.decayed(u, now) < 1) this.usage.delete(key);
  }

  private decayed(u: Usage, now: number): number {
    return u.ms * 0.5 ** ((now - u.at) / HALF_LIFE_MS);
  }
}
