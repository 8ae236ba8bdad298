// Fixed one-minute windows per key (source IP or customer), in memory: the
// control plane is one process per node. Returns seconds to wait, or 0.
export class RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();
  constructor(
    private readonly now: () => number,
    private readonly windowMs = 60_000,
  ) {}

  /** Counts one hit; returns retry-after seconds when over `limit`, else 0. */
  hit(key: string, limit: number): number {
    const t = this.now();
    let w = this.windows.get(key);
    if (!w || t - w.start >= this.windowMs) {
      w = { start: t, count: 0 };
      this.windows.set(key, w);
      if (this.windows.size > 100_000) this.prune(t);
    }
    w.count += 1;
    if (w.count <= limit) return 0;
    return Math.max(1, Math.ceil((w.start + this.windowMs - t) / 1000));
  }

  private prune(t: number): void {
    for (const [k, w] of this.windows) if (t - w.start >= this.windowMs) this.windows.delete(k);
  }
}
