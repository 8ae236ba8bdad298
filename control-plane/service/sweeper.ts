// TTL expiry: destroys live capsules whose time ran out (trigger ttl_expired,
// status `expired`, proof included). One pass at a time.
import type { Deps } from './deps.js';
import type { DestructionService } from './destruction.js';
import type { RecoveryGate } from './recovery.js';

export class Sweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  constructor(
    private readonly d: Deps,
    private readonly destruction: DestructionService,
    private readonly intervalMs: number,
    private readonly gate: RecoveryGate,
  ) {}

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
    let due;
    try {
      due = await this.d.store.expiredLiveCapsules(this.d.clock.nowIso());
    } catch (e) {
      this.d.log.error({ err: e }, 'sweeper: listing expired capsules failed');
      return;
    }
    for (const c of due) {
      try {
        await this.destruction.destroy(c, 'ttl_expired');
      } catch (e) {
        this.d.log.warn({ capsule_id: c.id, err: e }, 'sweeper: destroy failed; retrying next pass');
      }
    }
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }
}
