// Start-up reconciliation with the runner: capsules the runner reports lost,
// and live capsules it no longer knows, become `expired_unclean` with a signed
// partial proof; capsules only the runner knows are destroyed.
import { ApiError } from '../../shared/errors.js';
import type { RunnerHello, RunnerPort } from '../../shared/runner-protocol.js';
import { LIVE_STATUSES, type Capsule, type RunnerRegistry } from '../domain/index.js';
import type { Deps, Log } from './deps.js';
import { LOST_ON_RESTART, type DestructionService } from './destruction.js';
import type { Retries } from './retries.js';

export interface RecoveryReport {
  expired_unclean: string[];
  orphans_destroyed: string[];
  /** Capsules whose partial proof failed: retried by the sweeper under their own budget. */
  failed: string[];
}

/** With several runners and replicas, a suspect is judged again after this (a destroy or create under way elsewhere). */
const CONFIRM_MS = 3000;
/** A sandbox with a placement younger than this and no row yet is a create under way on some replica. */
const ORPHAN_GRACE_MS = 60_000;

export async function recover(
  d: Deps,
  destruction: DestructionService,
  creating: ReadonlySet<string>,
  retries: Retries,
): Promise<RecoveryReport> {
  const report: RecoveryReport = { expired_unclean: [], orphans_destroyed: [], failed: [] };
  const nodes = d.runner.nodes?.();
  if (nodes && d.runnerRegistry) {
    // Several runners: each reachable runner against the capsules placed on it. Capsules of an
    // unreachable runner wait: it comes back (reconciled then) or is declared lost (sweeper).
    const registry = d.runnerRegistry;
    if (nodes.length === 0) throw new Error('no runner is reachable');
    for (const n of nodes)
      await reconcile(d, destruction, creating, retries, report, {
        runner: n.runner,
        hello: n.hello,
        live: () => registry.liveCapsulesOn(n.node_id),
        shared: { registry },
      });
  } else {
    await reconcile(d, destruction, creating, retries, report, {
      runner: d.runner,
      hello: await d.runner.hello(),
      live: () => d.store.liveCapsules(),
      shared: null,
    });
  }
  if (report.expired_unclean.length || report.orphans_destroyed.length || report.failed.length)
    d.log.warn({ ...report }, 'recovery done');
  return report;
}

interface Target {
  runner: RunnerPort;
  hello: RunnerHello;
  live: () => Promise<Capsule[]>;
  /** Set when other control planes may be creating or destroying on this runner right now. */
  shared: { registry: RunnerRegistry } | null;
}

async function reconcile(
  d: Deps,
  destruction: DestructionService,
  creating: ReadonlySet<string>,
  retries: Retries,
  report: RecoveryReport,
  t: Target,
): Promise<void> {
  // Creates in flight around the listing: the runner may hold their sandbox before their row exists,
  // or their row may appear before the runner lists their sandbox. Neither is judged in this pass.
  const inFlight = new Set(creating);
  let onRunner = new Set(await t.runner.list());
  for (const id of creating) inFlight.add(id);
  const creatingNow = (id: string): boolean => inFlight.has(id) || creating.has(id);
  const lost = new Map(t.hello.lost.map((l) => [l.capsule_id, l]));
  const live = await t.live();
  const known = new Set(live.map((c) => c.id));
  let missing = live.filter((c) => !lost.has(c.id) && !onRunner.has(c.id) && !creatingNow(c.id));
  if (t.shared && missing.length > 0) {
    // Another replica may be between its runner destroy and its status move: look again a little later.
    await new Promise((r) => setTimeout(r, CONFIRM_MS));
    onRunner = new Set(await t.runner.list());
    const still = new Set((await t.live()).map((c) => c.id));
    missing = missing.filter((c) => still.has(c.id) && !onRunner.has(c.id));
  }
  const expire = [...live.filter((c) => lost.has(c.id)), ...missing];
  for (const c of expire) {
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
  for (const id of onRunner) {
    // A create in flight (sandbox made, row not yet inserted) is not an orphan; it undoes itself on failure.
    if (known.has(id) || creatingNow(id)) continue;
    if (t.shared) {
      // Another replica's create in flight: placed a moment ago, its row not yet written.
      const row = await d.store.getCapsule(id);
      if (row && LIVE_STATUSES.includes(row.status)) continue;
      const placed = await t.shared.registry.placementOf(id);
      if (!row && placed && d.clock.nowMs() - placed.placed_ms < ORPHAN_GRACE_MS) continue;
    }
    // Not ours any more (its row is final or absent): nothing may keep running.
    await t.runner
      .destroy(id)
      .catch((e: unknown) => d.log.warn({ capsule_id: id, err: e }, 'recovery: orphan destroy failed'));
    report.orphans_destroyed.push(id);
  }
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
