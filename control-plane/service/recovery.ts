// Start-up reconciliation with the runner: capsules the runner reports lost,
// and live capsules it no longer knows, become `expired_unclean` with a signed
// partial proof; capsules only the runner knows are destroyed.
import { ApiError } from '../../shared/errors.js';
import type { Deps, Log } from './deps.js';
import { LOST_ON_RESTART, type DestructionService } from './destruction.js';
import type { Retries } from './retries.js';

export interface RecoveryReport {
  expired_unclean: string[];
  orphans_destroyed: string[];
  /** Capsules whose partial proof failed: retried by the sweeper under their own budget. */
  failed: string[];
}

export async function recover(
  d: Deps,
  destruction: DestructionService,
  creating: ReadonlySet<string>,
  retries: Retries,
): Promise<RecoveryReport> {
  const hello = await d.runner.hello();
  // Creates in flight around the listing: the runner may hold their sandbox before their row exists,
  // or their row may appear before the runner lists their sandbox. Neither is judged in this pass.
  const inFlight = new Set(creating);
  const onRunner = new Set(await d.runner.list());
  for (const id of creating) inFlight.add(id);
  const creatingNow = (id: string): boolean => inFlight.has(id) || creating.has(id);
  const lost = new Map(hello.lost.map((l) => [l.capsule_id, l]));
  const report: RecoveryReport = { expired_unclean: [], orphans_destroyed: [], failed: [] };
  const live = await d.store.liveCapsules();
  const known = new Set(live.map((c) => c.id));
  for (const c of live) {
    if (lost.has(c.id) || (!onRunner.has(c.id) && !creatingNow(c.id))) {
      // One capsule's failure is its own: logged, retried later, never a failed start.
      try {
        await destruction.partial(c, LOST_ON_RESTART, lost.get(c.id));
        report.expired_unclean.push(c.id);
      } catch (e) {
        d.log.error({ capsule_id: c.id, err: e }, 'recovery: partial proof failed; the sweeper retries it');
        retries.fail(c.id, { lost: lost.get(c.id) });
        report.failed.push(c.id);
      }
    }
  }
  for (const id of onRunner) {
    // A create in flight (sandbox made, row not yet inserted) is not an orphan; it undoes itself on failure.
    if (known.has(id) || creatingNow(id)) continue;
    // Not ours any more (its row is final or absent): nothing may keep running.
    await d.runner
      .destroy(id)
      .catch((e: unknown) => d.log.warn({ capsule_id: id, err: e }, 'recovery: orphan destroy failed'));
    report.orphans_destroyed.push(id);
  }
  if (report.expired_unclean.length || report.orphans_destroyed.length || report.failed.length)
    d.log.warn({ ...report }, 'recovery done');
  return report;
}

/**
 * Capsule operations wait until reconciliation with the runner has succeeded
 * once; while the runner is unreachable they answer 503 and the next call
 * tries again. The control plane itself starts either way.
 */
export class RecoveryGate {
  private done: RecoveryReport | null = null;
  private pending: Promise<RecoveryReport> | null = null;
  constructor(
    private readonly run: () => Promise<RecoveryReport>,
    private readonly log: Log,
  ) {}

  get report(): RecoveryReport | null {
    return this.done;
  }

  /** The runner restarted: reconcile again before the next capsule call. */
  reset(): void {
    this.done = null;
  }

  async ensure(): Promise<RecoveryReport> {
    if (this.done) return this.done;
    this.pending ??= this.run()
      .then(
        (r) => {
          this.done = r;
          return r;
        },
        (e: unknown) => {
          this.log.warn({ err: e }, 'runner reconciliation failed; capsule operations unavailable');
          throw e;
        },
      )
      .finally(() => {
        this.pending = null;
      });
    try {
      return await this.pending;
    } catch (e) {
      throw new ApiError('service_unavailable', 'the capsule runner is unavailable', {
        cause: e,
        extra: { retry_after: 5 },
      });
    }
  }
}
