// The BillingStore port: a payment processor event is recorded by id and
// applied in one transaction, so a replayed event (same id) changes nothing
// and a crash never leaves an event half-applied.
import type { SqlEntityManager } from '@mikro-orm/sql';
import type { BillingStore, TierChange } from '../domain/index.js';
import type { Orm } from './orm.js';
import { all, run } from './sql.js';

export class SqlBillingStore implements BillingStore {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  async applyBillingEvent(
    event: { id: string; type: string; received_at: string },
    change: TierChange | null,
  ): Promise<'applied' | 'duplicate' | 'ignored'> {
    return this.em().transactional(async (em) => {
      // A concurrent delivery of the same event waits on this row's lock, then inserts nothing.
      const fresh = await run(
        em,
        'insert into "billing_events" ("event_id", "type", "received_at") values (?, ?, ?) on conflict ("event_id") do nothing',
        [event.id, event.type, event.received_at],
      );
      if (fresh !== 1) return 'duplicate';
      if (change === null) return 'ignored';
      return change.kind === 'subscribed'
        ? this.subscribe(em, change, event.received_at)
        : this.end(em, change.subscription, event.received_at);
    });
  }

  private async subscribe(
    em: SqlEntityManager,
    c: Extract<TierChange, { kind: 'subscribed' }>,
    at: string,
  ): Promise<'applied' | 'ignored'> {
    if ((await run(em, 'update "accounts" set "tier" = ? where "customer_id" = ?', [c.tier, c.customer_id])) !== 1)
      return 'ignored';
    const n = await run(
      em,
      'update "billing_subscriptions" set "processor_customer" = ?, "subscription" = ?, "tier" = ?, "updated_at" = ? where "customer_id" = ?',
      [c.processor_customer, c.subscription, c.tier, at, c.customer_id],
    );
    if (n === 0)
      await run(
        em,
        'insert into "billing_subscriptions" ("customer_id", "processor_customer", "subscription", "tier", "updated_at") values (?, ?, ?, ?, ?)',
        [c.customer_id, c.processor_customer, c.subscription, c.tier, at],
      );
    return 'applied';
  }

  /** The account whose current subscription ended goes back to free; an older, replaced subscription changes nothing. */
  private async end(em: SqlEntityManager, subscription: string, at: string): Promise<'applied' | 'ignored'> {
    const rows = await all<{ customer_id: string }>(
      em,
      'select "customer_id" from "billing_subscriptions" where "subscription" = ?',
      [subscription],
    );
    const customerId = rows[0]?.customer_id;
    if (!customerId) return 'ignored';
    await run(em, `update "accounts" set "tier" = 'free' where "customer_id" = ?`, [customerId]);
    await run(
      em,
      `update "billing_subscriptions" set "subscription" = null, "tier" = 'free', "updated_at" = ? where "customer_id" = ?`,
      [at, customerId],
    );
    return 'applied';
  }
}
