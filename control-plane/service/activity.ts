// Bounded activity trails. A capsule's trail holds at most `activityCap`
// events; past it events are counted (and their side effects applied) but not
// stored, and one `ActivityTruncated` event with the totals is appended at
// destroy, just before `DestructionInitiated`. Proofs read the trail from the
// database in pages and fold it into the RFC 6962 activity root as it goes,
// so building one never holds more than a page plus the part carried inline.
import { canonicalize, MerkleAccumulator, toHex, type ActivityEvent } from '../../shared/proof/index.js';
import type { Deps } from './deps.js';

const EXEC_ENDS: ReadonlySet<string> = new Set(['ExecutionCompleted', 'ExecutionOomKilled', 'ExecutionFailed']);

export const DEFAULT_ACTIVITY_CAP = 10_000;
/** Events read per database round trip while folding a trail. */
export const ACTIVITY_PAGE = 2_000;

export function activityCap(d: Deps): number {
  return d.maxActivityEvents ?? DEFAULT_ACTIVITY_CAP;
}

/**
 * Most events a record carries inline. A capped trail stays under it: the cap,
 * one completion per recorded start, ActivityTruncated and DestructionInitiated.
 * Longer trails (written before the cap existed) are bound by the root only.
 */
export function inlineBound(d: Deps): number {
  return 2 * activityCap(d) + 2;
}

/** Appends the one ActivityTruncated event when the cap dropped anything (never itself capped). */
export async function recordTruncation(d: Deps, capsuleId: string): Promise<void> {
  const drops = await d.store.activityDrops(capsuleId);
  if (drops.dropped_events === 0) return;
  await d.store.appendActivity(capsuleId, 'ActivityTruncated', d.clock.nowIso(), {
    dropped_events: drops.dropped_events,
    first_dropped_type: drops.first_dropped_type,
    reason: `activity_event_cap_${activityCap(d)}`,
  });
}

export interface FoldedTrail {
  /** `sha512:<hex>` over every stored event. */
  root: string;
  count: number;
  first_seq: number | null;
  last: ActivityEvent | null;
  /** ExecutionStarted events without their completion (ExecutionCompleted, ExecutionOomKilled, ExecutionFailed). */
  open_executions: number;
  /** The events, when the trail is within `inline`; null when only the root binds it. */
  events: ActivityEvent[] | null;
}

/** Reads the trail page by page into its activity root; keeps the events only up to `inline`. */
export async function foldTrail(d: Deps, capsuleId: string, inline: number): Promise<FoldedTrail> {
  const acc = new MerkleAccumulator(d.proofCrypto);
  const enc = new TextEncoder();
  let kept: ActivityEvent[] | null = [];
  let after = 0;
  let firstSeq: number | null = null;
  let last: ActivityEvent | null = null;
  let open = 0;
  for (;;) {
    const page = await d.store.activityPage(capsuleId, after, ACTIVITY_PAGE);
    for (const e of page) {
      acc.push(enc.encode(canonicalize(e)));
      firstSeq ??= e.seq;
      last = e;
      if (e.type === 'ExecutionStarted') open++;
      else if (EXEC_ENDS.has(e.type)) open = Math.max(0, open - 1);
      if (kept !== null) {
        if (kept.length < inline) kept.push(e);
        else kept = null;
      }
    }
    if (page.length < ACTIVITY_PAGE) break;
    after = page[page.length - 1]!.seq;
    // The SQLite driver answers synchronously: without a macrotask turn here a long fold
    // would hold the event loop (other tenants' requests) until the whole trail is read.
    await new Promise<void>((r) => setImmediate(r));
  }
  return {
    root: 'sha512:' + toHex(acc.root()),
    count: acc.count,
    open_executions: open,
    first_seq: firstSeq,
    last,
    events: kept,
  };
}
