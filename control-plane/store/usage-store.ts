// Usage items: one row per billable event, inserted by the stores inside the
// transaction of the event itself (insertUsage), read here page by page
// (keyset over created_at, id; oldest first) and summed per billing cycle.
import type { SqlEntityManager } from '@mikro-orm/sql';
import type {
  UsageCounts,
  UsageEntry,
  UsageItem,
  UsageKind,
  UsagePage,
  UsageQuery,
  UsageStore,
  UsageTotals,
} from '../domain/index.js';
import { USAGE_KINDS } from '../domain/index.js';
import type { Orm } from './orm.js';
import { all, num, page, run } from './sql.js';

/** Writes one usage item in `em`'s transaction; billability is the capsule's. */
export async function insertUsage(
  em: SqlEntityManager,
  u: UsageEntry,
  customerId: string,
  capsuleId: string,
  billable: boolean,
): Promise<void> {
  await run(
    em,
    'insert into "usage_items" ("id", "customer_id", "kind", "capsule_id", "quantity", "billable", "created_at") values (?, ?, ?, ?, ?, ?, ?)',
    [u.id, customerId, u.kind, capsuleId, u.quantity, billable ? 1 : 0, u.at],
  );
}

interface UsageRow {
  id: string;
  customer_id: string;
  kind: string;
  capsule_id: string;
  quantity: unknown;
  billable: unknown;
  created_at: string;
}

const toItem = (r: UsageRow): UsageItem => ({
  id: r.id,
  customer_id: r.customer_id,
  kind: r.kind as UsageKind,
  capsule_id: r.capsule_id,
  quantity: num(r.quantity),
  billable: num(r.billable) === 1,
  created_at: r.created_at,
});

const zero = (): UsageCounts =>
  Object.fromEntries(USAGE_KINDS.map((k) => [k, { events: 0, quantity: 0 }])) as UsageCounts;

export class SqlUsageStore implements UsageStore {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  async listUsage(customerId: string, q: UsageQuery): Promise<UsagePage> {
    const where = ['"customer_id" = ?'];
    const params: unknown[] = [customerId];
    if (q.from !== null) {
      where.push('"created_at" >= ?');
      params.push(q.from);
    }
    if (q.to !== null) {
      where.push('"created_at" < ?');
      params.push(q.to);
    }
    if (q.cursor !== null) {
      const [at, id] = q.cursor.split('|');
      // A row-value comparison: both databases seek the (customer_id, created_at, id) index to it.
      where.push('("created_at", "id") > (?, ?)');
      params.push(at, id);
    }
    const rows = await all<UsageRow>(
      this.em(),
      `select "id", "customer_id", "kind", "capsule_id", "quantity", "billable", "created_at" from "usage_items"
       where ${where.join(' and ')} order by "created_at" asc, "id" asc limit ?`,
      [...params, q.limit + 1],
    );
    return page(rows.map(toItem), q.limit);
  }

  async usageTotals(customerId: string, fromIso: string): Promise<UsageTotals> {
    const em = this.em();
    const rows = await all<{ kind: string; billable: unknown; n: unknown; q: unknown }>(
      em,
      `select "kind", "billable", count(*) as "n", sum("quantity") as "q" from "usage_items"
       where "customer_id" = ? and "created_at" >= ? group by "kind", "billable"`,
      [customerId, fromIso],
    );
    const totals: UsageTotals = { live: zero(), test: zero(), bytes_processed: 0 };
    for (const r of rows) {
      const side = num(r.billable) === 1 ? totals.live : totals.test;
      const k = r.kind as UsageKind;
      if (side[k]) side[k] = { events: num(r.n), quantity: num(r.q ?? 0) };
    }
    const bytes = await all<{ b: unknown }>(
      em,
      `select sum("bytes_processed") as "b" from "capsules" where "customer_id" = ? and "created_at" >= ? and "billable" = 1`,
      [customerId, fromIso],
    );
    totals.bytes_processed = num(bytes[0]?.b ?? 0);
    return totals;
  }
}
