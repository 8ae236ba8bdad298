// Per-capsule retry budgets for recovery and the sweeper: one capsule that
// keeps failing (a poisoned trail, a runner that refuses it) gets its own
// error log, exponential backoff on the injected clock and a bounded number
// of attempts, then a terminal state; it never blocks start-up or the others.
import type { LostCapsule } from '../../shared/runner-protocol.js';
import type { Clock } from '../domain/index.js';

export interface RetryPolicy {
  maxAttempts: number;
  baseMs: number;
  maxMs: number;
}

/** 8 attempts, 1 s doubling to 60 s: about four minutes before a capsule is given up. */
export const DEFAULT_RETRY_POLICY: RetryPolicy = { maxAttempts: 8, baseMs: 1000, maxMs: 60_000 };

interface Entry {
  attempts: number;
  nextMs: number;
  /** A partial proof recovery could not build, with the runner's recovery report for it. */
  partial: { lost: LostCapsule | undefined } | null;
}

export class Retries {
  private readonly entries = new Map<string, Entry>();
  constructor(
    private readonly clock: Clock,
    readonly policy: RetryPolicy = DEFAULT_RETRY_POLICY,
  ) {}

  /** True when `id` has no failure on record or its backoff has passed. */
  due(id: string): boolean {
    const e = this.entries.get(id);
    return !e || e.nextMs <= this.clock.nowMs();
  }

  attempts(id: string): number {
    return this.entries.get(id)?.attempts ?? 0;
  }

  /** Records one failure; 'exhausted' once the budget is spent (the entry is then dropped). */
  fail(id: string, partial?: { lost: LostCapsule | undefined }): 'retry' | 'exhausted' {
    const prev = this.entries.get(id);
    const attempts = (prev?.attempts ?? 0) + 1;
    if (attempts >= this.policy.maxAttempts) {
      this.entries.delete(id);
      return 'exhausted';
    }
    const delay = Math.min(this.policy.maxMs, this.policy.baseMs * 2 ** (attempts - 1));
    this.entries.set(id, {
      attempts,
      nextMs: this.clock.nowMs() + delay,
      partial: partial ?? prev?.partial ?? null,
    });
    return 'retry';
  }

  succeed(id: string): void {
    this.entries.delete(id);
  }

  /** Partial proofs recovery still owes, with their runner recovery reports. */
  pendingPartials(): { id: string; lost: LostCapsule | undefined }[] {
    return [...this.entries].flatMap(([id, e]) => (e.partial ? [{ id, lost: e.partial.lost }] : []));
  }
}
