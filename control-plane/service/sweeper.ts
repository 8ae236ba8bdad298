// TTL expiry: destroys live capsules whose time ran out (trigger ttl_expired,
// status `expired`, proof included), retries the partial proofs recovery
// could not build, and signs proofs buffered while the signing key was away.
// With several control planes on one database only the holder of the
// `ttl-sweeper` lease sweeps (renewed each pass, free after 5 intervals). One pass at a time; each capsule has its own retry budget
// (retries.ts): one that keeps failing ends `expired_unclean`, the rest go on.
import type { Deps } from './deps.js';
import { isoMicros } from '../../shared/time.js';
import { newId } from './ids.js';
import { LIVE_STATUSES } from '../domain/index.js';
import { LOST_ON_RESTART, RUNNER_LOST, type DestructionService } from './destruction.js';
import type { Retries } from './retries.js';
import type { RecoveryGate } from './recovery.js';

const SWEEPER_LEASE = 'ttl-sweeper';

export class Sweeper {
  /** This process's name in the lease table. */
  private readonly owner: string;
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  constructor(
    private readonly d: Deps,
    private readonly destruction: DestructionService,
    private readonly intervalMs: number,
    private readonly gate: RecoveryGate,
    private readonly retries: Retries,
  ) {
    this.owner = newId('cp_', d.random);
  }

  start(): void {
    if (this.timer) return;
    this.timer = setInterval(() => {
      void this.sweep();
    }, this.intervalMs);
    this.timer.unref();
  }

  /** One pass; concurrent calls share it. */
  sweep(): Promise<void> {
    this.running ??= this.pass().finally(() => {
      this.running = null;
    });
    return this.running;
  }

  private async pass(): Promise<void> {
    try {
      await this.gate.ensure();
    } catch {
      return;
    }
    // Several control planes on one database: the lease holder sweeps, the others wait their turn.
    const now = this.d.clock.nowMs();
    const held = await this.d.store
      .claimLease(SWEEPER_LEASE, this.owner, isoMicros(now), isoMicros(now + this.intervalMs * 5))
      .catch((e: unknown) => {
        this.d.log.error({ err: e }, 'sweeper: taking the lease failed');
        return false;
      });
    if (!held) return;
    let due;
    try {
      due = await this.d.store.expiredLiveCapsules(this.d.clock.nowIso());
    } catch (e) {
      this.d.log.error({ err: e }, 'sweeper: listing expired capsules failed');
      return;
    }
    // Proofs buffered while the managed signing key was unavailable: signed as soon as it is back.
    await this.destruction
      .signPending()
      .catch((e: unknown) => this.d.log.error({ err: e }, 'sweeper: signing buffered proofs failed'));
    await this.lostRunners(now);
    for (const p of this.retries.pendingPartials()) {
      if (!this.retries.due(p.id)) continue;
      await this.isolated(p.id, 'partial proof', async () => {
        const c = await this.d.store.getCapsule(p.id);
        if (c && LIVE_STATUSES.includes(c.status)) await this.destruction.partial(c, LOST_ON_RESTART, p.lost);
      });
    }
    for (const c of due) {
      if (!this.retries.due(c.id) || this.retries.pendingPartials().some((p) => p.id === c.id)) continue;
      // A proof buffered for the signing key is not a failure: the wipe is done and stored.
      await this.isolated(c.id, 'destroy', () =>
        this.destruction.destroyOrBuffer(c, 'ttl_expired').then(() => undefined),
      );
    }
  }

  /**
   * Several runners: one no control plane reached for runnerLostAfterMs is declared lost (once,
   * by whichever sweeps first), and its live capsules end expired_unclean with partial proofs.
   */
  private async lostRunners(nowMs: number): Promise<void> {
    const registry = this.d.runnerRegistry;
    const after = this.d.runnerLostAfterMs;
    if (!registry || !after) return;
    try {
      for (const node_id of await registry.declareLost(nowMs, after))
        this.d.log.error({ node_id }, 'runner declared lost: its live capsules end expired_unclean');
      for (const c of await registry.liveCapsulesOnLostNodes(100))
        await this.isolated(c.id, 'partial proof', () => this.destruction.partial(c, RUNNER_LOST));
      // Placements of creates that were undone, or of capsules given up, after an hour.
      await registry.prunePlacements(nowMs - 3_600_000);
    } catch (e) {
      this.d.log.error({ err: e }, 'sweeper: lost runner check failed');
    }
  }

  /** Runs one capsule's step; a failure is logged with its id and spends that capsule's budget only. */
  private async isolated(id: string, what: string, step: () => Promise<void>): Promise<void> {
    try {
      await step();
      this.retries.succeed(id);
    } catch (e) {
      const pending = this.retries.pendingPartials().find((p) => p.id === id);
      const verdict = this.retries.fail(id, pending ? { lost: pending.lost } : undefined);
      const attempts = this.retries.attempts(id);
      if (verdict === 'retry') {
        this.d.log.warn({ capsule_id: id, err: e, attempts }, `sweeper: ${what} failed; retried after backoff`);
        return;
      }
      this.d.log.error({ capsule_id: id, err: e }, `sweeper: ${what} kept failing; capsule given up`);
      await this.destruction
        .abandon(id, `${what}_failed_repeatedly`)
        .catch((err: unknown) => this.d.log.error({ capsule_id: id, err }, 'sweeper: giving up a capsule failed'));
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
    await this.d.store.releaseLease(SWEEPER_LEASE, this.owner).catch(() => undefined);
  }
}
