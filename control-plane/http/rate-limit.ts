// Fixed one-minute windows per key (source IP or customer). Source-IP
// windows live in this process's memory. Customer windows live there too on
// a single-node install (SQLite), and in the database when several control
// planes share PostgreSQL, so an account's rate_limit_rpm holds across
// replicas instead of multiplying by their number. Returns seconds to wait, or 0.

/** Counts one hit in the shared window starting at `windowStartMs`; the count so far. */
export type SharedWindowCounter = (key: string, windowStartMs: number) => Promise<number>;

export class RateLimiter {
  private readonly windows = new Map<string, { start: number; count: number }>();
  constructor(
    private readonly now: () => number,
    private readonly windowMs = 60_000,
    private readonly shared: SharedWindowCounter | null = null,
  ) {}

  /** Counts one hit in this process; returns retry-after seconds when over `limit`, else 0. */
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

  /** A customer's hit: counted in the database's window when shared, else as `hit`. */
  async hitAccount(key: string, limit: number): Promise<number> {
    if (!this.shared) return this.hit(key, limit);
    const t = this.now();
    // Windows aligned to the clock, so every replica counts into the same one.
    const start = t - (t % this.windowMs);
    const count = await this.shared(key, start);
    if (count <= limit) return 0;
    return Math.max(1, Math.ceil((start + this.windowMs - t) / 1000));
  }

  private prune(t: number): void {
    for (const [k, w] of this.windows) if (t - w.start >= this.windowMs) this.windows.delete(k);
  }
}
