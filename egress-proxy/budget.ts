// Byte budgets for what the proxy holds in memory on a capsule's behalf:
// request bodies buffered for MCP inspection and the response copies kept to
// find a tool's result. One budget per capsule (its proxy) and one shared by
// every proxy of the process; an exchange holds bytes from both or from neither.

export class ByteBudget {
  #used = 0;
  constructor(readonly limit: number) {
    if (!Number.isSafeInteger(limit) || limit < 0) throw new TypeError('byte budget: a non-negative integer');
  }

  get used(): number {
    return this.#used;
  }

  /** Takes n bytes if they fit; false (nothing taken) otherwise. */
  take(n: number): boolean {
    if (this.#used + n > this.limit) return false;
    this.#used += n;
    return true;
  }

  give(n: number): void {
    this.#used = Math.max(0, this.#used - n);
  }
}

/** One exchange's bytes held from several budgets; release() returns them all (idempotent). */
export class BudgetHold {
  #held = 0;
  constructor(private readonly budgets: readonly ByteBudget[]) {}

  get held(): number {
    return this.#held;
  }

  /** All budgets or none. */
  take(n: number): boolean {
    const taken: ByteBudget[] = [];
    for (const b of this.budgets) {
      if (!b.take(n)) {
        for (const t of taken) t.give(n);
        return false;
      }
      taken.push(b);
    }
    this.#held += n;
    return true;
  }

  /** Returns n of the held bytes (a copy that was dropped). */
  give(n: number): void {
    const m = Math.min(n, this.#held);
    for (const b of this.budgets) b.give(m);
    this.#held -= m;
  }

  release(): void {
    this.give(this.#held);
  }
}
