// Requests served round robin by key (a tenant): each key's requests keep
// their order, and a key with one request waits behind at most one request
// of every other key, however many those have queued.

export class FairQueue<T> {
  // Insertion order is the round: a key that was served goes to the back.
  private readonly byKey = new Map<string, T[]>();

  get size(): number {
    return this.byKey.size;
  }

  push(key: string, item: T): void {
    const q = this.byKey.get(key);
    if (q) q.push(item);
    else this.byKey.set(key, [item]);
  }

  /** Takes out the first waiting request of `key` that matches; the rest keep their places. */
  remove(key: string, match: (item: T) => boolean): T | undefined {
    const q = this.byKey.get(key);
    const i = q ? q.findIndex(match) : -1;
    if (!q || i < 0) return undefined;
    const [item] = q.splice(i, 1);
    if (q.length === 0) this.byKey.delete(key);
    return item;
  }

  /**
   * The oldest request of the key whose turn it is; with `match`, of the first key in the round
   * whose oldest request matches (the others keep their turn).
   */
  shift(match?: (item: T) => boolean): T | undefined {
    for (const [key, q] of this.byKey) {
      if (match && !match(q[0]!)) continue;
      this.byKey.delete(key);
      const item = q.shift();
      if (q.length > 0) this.byKey.set(key, q);
      return item;
    }
    return undefined;
  }
}
