// Allocator of per-capsule host uids (gid = uid) from the configured range.
export class UidPool {
  private readonly used = new Set<number>();
  constructor(
    readonly base: number,
    readonly count: number,
  ) {}

  allocate(): number | null {
    for (let i = 0; i < this.count; i++) {
      const uid = this.base + i;
      if (!this.used.has(uid)) {
        this.used.add(uid);
        return uid;
      }
    }
    return null;
  }

  /** Marks a uid (e.g. one found during recovery) as in use. */
  claim(uid: number): void {
    this.used.add(uid);
  }

  release(uid: number): void {
    this.used.delete(uid);
  }

  inRange(uid: number): boolean {
    return Number.isInteger(uid) && uid >= this.base && uid < this.base + this.count;
  }
}
