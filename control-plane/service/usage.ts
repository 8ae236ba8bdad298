// Usage: the items written beside each billable event, the current cycle's
// summary, the estimate from the price table, and item pages for JSON and CSV.
import type { Caller, UsageCounts, UsageEntry, UsageItem, UsageKind, UsagePage } from '../domain/index.js';
import { estimateCharges, USAGE_UNITS } from '../domain/index.js';
import { publicLimits } from './accounts.js';
import { cycleStart, isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { newId } from './ids.js';

/** The usage item of one billable event, written by the store with the event. */
export function usageEntry(d: Pick<Deps, 'random'>, kind: UsageKind, quantity: number, at: string): UsageEntry {
  return { id: newId('usg_', d.random), kind, quantity, at };
}

/** Rows per query when exporting: each query is short, so an export never holds a connection for long. */
export const EXPORT_BATCH = 2000;

/** Start of the month after the cycle that began at `startIso`. */
function cycleEnd(startIso: string): string {
  const d = new Date(startIso);
  return isoMicros(Date.UTC(d.getUTCFullYear(), d.getUTCMonth() + 1, 1));
}

const DAY_MS = 86_400_000;

/** Counts in the summary's words (exec time in seconds). */
function summaryCounts(c: UsageCounts): Record<string, number> {
  return {
    capsules: c.capsule.events,
    proofs: c.proof.events,
    exec_seconds: c.exec.quantity / 1000,
    egress_requests: c.egress_request.events,
  };
}

/** Wire fields of an item: JSON objects and CSV rows carry the same ones in this order. */
export const ITEM_FIELDS = ['id', 'created_at', 'kind', 'capsule_id', 'quantity', 'unit', 'mode', 'billable'] as const;
export type ItemField = (typeof ITEM_FIELDS)[number];

/** An item as one CSV row (the values of ITEM_FIELDS, in order). */
export function itemRow(i: UsageItem): (string | number | boolean)[] {
  return [
    i.id,
    i.created_at,
    i.kind,
    i.capsule_id,
    i.quantity,
    USAGE_UNITS[i.kind],
    i.billable ? 'live' : 'test',
    i.billable,
  ];
}

export function itemView(i: UsageItem): Record<ItemField, string | number | boolean> {
  const row = itemRow(i);
  return Object.fromEntries(ITEM_FIELDS.map((f, k) => [f, row[k]])) as Record<ItemField, string | number | boolean>;
}

export class UsageService {
  constructor(private readonly d: Deps) {}

  private cycle(): { start: string; end: string; nowMs: number } {
    const nowMs = this.d.clock.nowMs();
    const start = cycleStart(nowMs);
    return { start, end: cycleEnd(start), nowMs };
  }

  async summary(caller: Caller): Promise<Record<string, unknown>> {
    const { start, end } = this.cycle();
    const a = caller.account;
    const totals = await this.d.usage.usageTotals(a.customer_id, start);
    const limits = this.d.tiers.limits(a.tier);
    return {
      tier: a.tier,
      billing_cycle_start: start,
      billing_cycle_end: end,
      ...summaryCounts(totals.live),
      bytes_processed: totals.bytes_processed,
      limits: { ...publicLimits(limits), cdp_limit: limits.cdp_limit },
      test_mode: summaryCounts(totals.test),
    };
  }

  async estimate(caller: Caller): Promise<Record<string, unknown>> {
    const { start, end, nowMs } = this.cycle();
    const a = caller.account;
    const totals = await this.d.usage.usageTotals(a.customer_id, start);
    // Linear projection to the cycle's end; under a day of data counts as a day.
    const elapsed = Math.max(nowMs - Date.parse(start), DAY_MS);
    const projection = Math.max(1, (Date.parse(end) - Date.parse(start)) / elapsed);
    return {
      tier: a.tier,
      billing_cycle_start: start,
      billing_cycle_end: end,
      as_of: isoMicros(nowMs),
      ...estimateCharges(this.d.prices, a.tier, totals.live, projection),
    };
  }

  async items(
    caller: Caller,
    q: { from: string | null; to: string | null; limit: number; cursor: string | null },
  ): Promise<UsagePage> {
    return this.d.usage.listUsage(caller.account.customer_id, q);
  }

  /**
   * Every item in the range, oldest first, one short query per batch, each
   * batch handed to `convert` as soon as it arrives (its item objects die
   * young; what `convert` returns is what waits). The next batch is fetched
   * while the caller works on the current one: at most two in memory.
   */
  async *exportItems<T>(
    caller: Caller,
    from: string | null,
    to: string | null,
    convert: (items: UsageItem[]) => T,
  ): AsyncGenerator<T> {
    const fetch = (cursor: string | null): Promise<{ out: T; next: string | null }> => {
      const p = this.d.usage
        .listUsage(caller.account.customer_id, { from, to, limit: EXPORT_BATCH, cursor })
        .then((page) => ({ out: convert(page.items), next: page.next_cursor }));
      p.catch(() => undefined); // a prefetch the consumer abandoned must not surface as unhandled
      return p;
    };
    let pending = fetch(null);
    for (;;) {
      const { out, next } = await pending;
      if (next !== null) pending = fetch(next);
      yield out;
      if (next === null) return;
    }
  }
}
