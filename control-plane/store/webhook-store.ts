// Webhook endpoints, the outbox (events and their delivery attempts) and the
// leased claims of the delivery worker. insertOutbox runs inside the caller's
// transaction, so an event exists exactly when its state change committed.
// Claims are one conditional UPDATE: a row whose lease is live is never taken
// by a second process (PostgreSQL re-checks the WHERE on the locked row).
import { createHash } from 'node:crypto';
import type { SqlEntityManager } from '@mikro-orm/sql';
import type {
  AttemptOutcome,
  ClaimedDelivery,
  ClaimOptions,
  DeliveryStatus,
  OutboxEvent,
  WebhookDelivery,
  WebhookEndpoint,
  WebhookEventType,
  WebhookPage,
  WebhookStore,
} from '../domain/index.js';
import type { Orm } from './orm.js';
import { all, num, run } from './sql.js';

interface EndpointRow {
  id: string;
  customer_id: string;
  url: string;
  events: string;
  description: string;
  active: unknown;
  secret_sealed: string;
  created_at: string;
  updated_at: string;
}

interface DeliveryRow {
  id: string;
  endpoint_id: string;
  customer_id: string;
  event_id: string;
  event_type: string;
  attempt_number: unknown;
  status: string;
  due_at: string;
  response_status: unknown;
  response_body: string | null;
  duration_ms: unknown;
  error: string | null;
  next_attempt_at: string | null;
  attempted_at: string | null;
  created_at: string;
  replay: unknown;
  replayed_at: string | null;
}

const toEndpoint = (r: EndpointRow): WebhookEndpoint => ({
  id: r.id,
  customer_id: r.customer_id,
  url: r.url,
  events: JSON.parse(r.events) as WebhookEventType[],
  description: r.description,
  active: num(r.active) === 1,
  secret_sealed: r.secret_sealed,
  created_at: r.created_at,
  updated_at: r.updated_at,
});

const toDelivery = (r: DeliveryRow): WebhookDelivery => ({
  id: r.id,
  endpoint_id: r.endpoint_id,
  customer_id: r.customer_id,
  event_id: r.event_id,
  event_type: r.event_type,
  attempt_number: num(r.attempt_number),
  status: r.status as DeliveryStatus,
  response_status: r.response_status === null ? null : num(r.response_status),
  response_body: r.response_body,
  duration_ms: r.duration_ms === null ? null : num(r.duration_ms),
  error: r.error,
  next_attempt_at: r.status === 'pending' ? r.due_at : r.next_attempt_at,
  attempted_at: r.attempted_at,
  created_at: r.created_at,
  replay: num(r.replay) === 1,
  replayed_at: r.replayed_at,
});

/** Attempt ids are derived (no randomness in the store): one per event, endpoint and attempt number. */
export const deliveryId = (eventId: string, endpointId: string, attempt: number): string =>
  `whd_${createHash('sha256').update(`${eventId}|${endpointId}|${attempt}`).digest('hex').slice(0, 24)}`;

const D_COLS = `d."id", d."endpoint_id", d."customer_id", d."event_id", d."event_type", d."attempt_number", d."status",
  d."due_at", d."response_status", d."response_body", d."duration_ms", d."error", d."next_attempt_at",
  d."attempted_at", d."created_at", d."replay", d."replayed_at"`;

async function insertAttempt(
  em: SqlEntityManager,
  a: {
    event_id: string;
    event_type: string;
    endpoint_id: string;
    customer_id: string;
    attempt: number;
    due_at: string;
    created_at: string;
    replay: boolean;
    lease?: { owner: string; leaseUntilIso: string } | undefined;
  },
): Promise<string> {
  const id = deliveryId(a.event_id, a.endpoint_id, a.attempt);
  await run(
    em,
    `insert into "webhook_deliveries" ("id", "endpoint_id", "customer_id", "event_id", "event_type", "attempt_number",
      "status", "due_at", "created_at", "replay", "lease_owner", "lease_until") values (?, ?, ?, ?, ?, ?, 'pending', ?, ?, ?, ?, ?)`,
    [
      id,
      a.endpoint_id,
      a.customer_id,
      a.event_id,
      a.event_type,
      a.attempt,
      a.due_at,
      a.created_at,
      a.replay ? 1 : 0,
      a.lease?.owner ?? null,
      a.lease?.leaseUntilIso ?? null,
    ],
  );
  return id;
}

/**
 * Writes events into the outbox inside `em`'s transaction: each event fans out
 * to a first attempt for every active endpoint of its account subscribed to
 * its type. An event nobody subscribes to is not stored.
 */
export async function insertOutbox(em: SqlEntityManager, events: readonly OutboxEvent[]): Promise<void> {
  const byCustomer = new Map<string, EndpointRow[]>();
  for (const ev of events) {
    let eps = byCustomer.get(ev.customer_id);
    if (!eps) {
      eps = await all<EndpointRow>(em, 'select * from "webhook_endpoints" where "customer_id" = ? and "active" = 1', [
        ev.customer_id,
      ]);
      byCustomer.set(ev.customer_id, eps);
    }
    const targets = eps.filter((e) => (JSON.parse(e.events) as string[]).includes(ev.type));
    if (targets.length === 0) continue;
    await run(
      em,
      'insert into "webhook_events" ("id", "customer_id", "type", "payload", "created_at") values (?, ?, ?, ?, ?)',
      [ev.id, ev.customer_id, ev.type, ev.payload, ev.created_at],
    );
    for (const e of targets)
      await insertAttempt(em, {
        event_id: ev.id,
        event_type: ev.type,
        endpoint_id: e.id,
        customer_id: ev.customer_id,
        attempt: 1,
        due_at: ev.created_at,
        created_at: ev.created_at,
        replay: false,
      });
  }
}

export class SqlWebhookStore implements WebhookStore {
  /** `pg`: the database is PostgreSQL (claims use FOR UPDATE SKIP LOCKED). */
  constructor(
    private readonly orm: Orm,
    private readonly pg: boolean,
  ) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  async insertEndpoint(e: WebhookEndpoint, max: number): Promise<'ok' | 'limit'> {
    return this.em().transactional(async (em) => {
      // The account row lock orders concurrent creates: the count below is exact.
      await run(em, 'update "accounts" set "tier" = "tier" where "customer_id" = ?', [e.customer_id]);
      const n = await all<{ n: unknown }>(
        em,
        'select count(*) as "n" from "webhook_endpoints" where "customer_id" = ?',
        [e.customer_id],
      );
      if (num(n[0]?.n ?? 0) >= max) return 'limit';
      await run(
        em,
        `insert into "webhook_endpoints" ("id", "customer_id", "url", "events", "description", "active", "secret_sealed",
          "created_at", "updated_at") values (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
        [
          e.id,
          e.customer_id,
          e.url,
          JSON.stringify(e.events),
          e.description,
          e.active ? 1 : 0,
          e.secret_sealed,
          e.created_at,
          e.updated_at,
        ],
      );
      return 'ok';
    });
  }

  async getEndpoint(id: string): Promise<WebhookEndpoint | null> {
    const r = await all<EndpointRow>(this.em(), 'select * from "webhook_endpoints" where "id" = ?', [id]);
    return r[0] ? toEndpoint(r[0]) : null;
  }

  async listEndpoints(customerId: string, limit: number, cursor: string | null): Promise<WebhookPage<WebhookEndpoint>> {
    const [at, id] = cursor ? cursor.split('|') : [null, null];
    const rows = await all<EndpointRow>(
      this.em(),
      `select * from "webhook_endpoints" where "customer_id" = ?
       ${cursor ? 'and ("created_at" < ? or ("created_at" = ? and "id" < ?))' : ''}
       order by "created_at" desc, "id" desc limit ?`,
      cursor ? [customerId, at, at, id, limit + 1] : [customerId, limit + 1],
    );
    return pageOf(rows.map(toEndpoint), limit);
  }

  async updateEndpoint(
    id: string,
    set: Partial<Pick<WebhookEndpoint, 'url' | 'events' | 'description' | 'active' | 'updated_at'>>,
  ): Promise<WebhookEndpoint | null> {
    const values: [string, unknown][] = [];
    if (set.url !== undefined) values.push(['url', set.url]);
    if (set.events !== undefined) values.push(['events', JSON.stringify(set.events)]);
    if (set.description !== undefined) values.push(['description', set.description]);
    if (set.active !== undefined) values.push(['active', set.active ? 1 : 0]);
    if (set.updated_at !== undefined) values.push(['updated_at', set.updated_at]);
    const cols = values.map(([c]) => `"${c}" = ?`);
    const params = values.map(([, v]) => v);
    if (cols.length > 0)
      await run(this.em(), `update "webhook_endpoints" set ${cols.join(', ')} where "id" = ?`, [...params, id]);
    return this.getEndpoint(id);
  }

  async deleteEndpoint(id: string): Promise<boolean> {
    return this.em().transactional(async (em) => {
      const n = await run(em, 'delete from "webhook_endpoints" where "id" = ?', [id]);
      await run(em, 'delete from "webhook_deliveries" where "endpoint_id" = ?', [id]);
      return n === 1;
    });
  }

  async insertDirectEvent(
    ev: OutboxEvent,
    endpointId: string,
    lease?: { owner: string; leaseUntilIso: string },
  ): Promise<string> {
    return this.em().transactional(async (em) => {
      await run(
        em,
        'insert into "webhook_events" ("id", "customer_id", "type", "payload", "created_at") values (?, ?, ?, ?, ?)',
        [ev.id, ev.customer_id, ev.type, ev.payload, ev.created_at],
      );
      return insertAttempt(em, {
        event_id: ev.id,
        event_type: ev.type,
        endpoint_id: endpointId,
        customer_id: ev.customer_id,
        attempt: 1,
        due_at: ev.created_at,
        created_at: ev.created_at,
        replay: false,
        lease,
      });
    });
  }

  async getDelivery(id: string): Promise<WebhookDelivery | null> {
    const r = await all<DeliveryRow>(this.em(), `select ${D_COLS} from "webhook_deliveries" d where d."id" = ?`, [id]);
    return r[0] ? toDelivery(r[0]) : null;
  }

  async listDeliveries(
    endpointId: string,
    limit: number,
    cursor: string | null,
  ): Promise<WebhookPage<WebhookDelivery>> {
    return this.deliveryPage('d."endpoint_id" = ?', [endpointId], limit, cursor);
  }

  async listDeadLetters(
    customerId: string,
    limit: number,
    cursor: string | null,
  ): Promise<WebhookPage<WebhookDelivery>> {
    return this.deliveryPage(
      `d."customer_id" = ? and d."status" = 'dead_lettered' and d."replayed_at" is null`,
      [customerId],
      limit,
      cursor,
    );
  }

  private async deliveryPage(
    where: string,
    params: unknown[],
    limit: number,
    cursor: string | null,
  ): Promise<WebhookPage<WebhookDelivery>> {
    const [at, id] = cursor ? cursor.split('|') : [null, null];
    const rows = await all<DeliveryRow>(
      this.em(),
      `select ${D_COLS} from "webhook_deliveries" d where ${where}
       ${cursor ? 'and (d."created_at" < ? or (d."created_at" = ? and d."id" < ?))' : ''}
       order by d."created_at" desc, d."id" desc limit ?`,
      cursor ? [...params, at, at, id, limit + 1] : [...params, limit + 1],
    );
    return pageOf(rows.map(toDelivery), limit);
  }

  async claimDue(o: ClaimOptions): Promise<ClaimedDelivery[]> {
    if (o.limit <= 0) return [];
    const skipC = o.skipCustomers ?? [];
    const skip =
      (o.skipEndpoints.length ? `and "endpoint_id" not in (${o.skipEndpoints.map(() => '?').join(', ')})` : '') +
      (skipC.length ? ` and "customer_id" not in (${skipC.map(() => '?').join(', ')})` : '');
    // Fair selection: at most perEndpoint rows per endpoint, replays first, then oldest due.
    // Rows another process leased between the select and the update are skipped; a round
    // that lost every row to another process selects again (it sees their leases now).
    for (let round = 0; round < 3; round++) {
      const got = await this.claimRound(o, skip);
      if (got === null) return [];
      if (got.length > 0) return got;
    }
    return [];
  }

  /** One select-then-lease round; null when nothing is due. */
  private async claimRound(o: ClaimOptions, skip: string): Promise<ClaimedDelivery[] | null> {
    const ids = await all<{ id: string }>(
      this.em(),
      `select "id" from (
         select "id", "due_at", "replay",
           row_number() over (partition by "endpoint_id" order by "replay" desc, "due_at", "id") as "rn"
         from "webhook_deliveries"
         where "status" = 'pending' and "due_at" <= ? and ("lease_until" is null or "lease_until" < ?) ${skip}
       ) x where "rn" <= ? order by "replay" desc, "due_at", "id" limit ?`,
      // More candidates than the limit, so rows another process is leasing right now can be skipped.
      [o.nowIso, o.nowIso, ...o.skipEndpoints, ...(o.skipCustomers ?? []), o.perEndpoint, o.limit * 4],
    );
    if (ids.length === 0) return null;
    return this.lease(
      ids.map((r) => r.id),
      o,
      o.limit,
    );
  }

  async claimOne(
    id: string,
    o: Pick<ClaimOptions, 'owner' | 'nowIso' | 'leaseUntilIso'>,
  ): Promise<ClaimedDelivery | null> {
    return (await this.lease([id], o, 1, true))[0] ?? null;
  }

  /** The claim itself: only rows still pending and unleased move; the ones that moved come back. */
  private async lease(
    ids: string[],
    o: Pick<ClaimOptions, 'owner' | 'nowIso' | 'leaseUntilIso'>,
    limit: number,
    /** Also take rows this owner already leases (claimOne of a pre-leased attempt). */
    own = false,
  ): Promise<ClaimedDelivery[]> {
    const em = this.em();
    // PostgreSQL: rows another transaction is claiming are skipped, not waited on (SKIP LOCKED);
    // SQLite runs one writer at a time, so the statement alone is the claim. Either way the
    // outer WHERE re-checks the lease on the row it updates.
    const live = `"status" = 'pending' and ("lease_until" is null or "lease_until" < ?${own ? ' or "lease_owner" = ?' : ''})`;
    const liveParams = own ? [o.nowIso, o.owner] : [o.nowIso];
    const claimed = await all<{ id: string }>(
      em,
      `update "webhook_deliveries" set "lease_owner" = ?, "lease_until" = ?
       where "id" in (select "id" from "webhook_deliveries" where "id" in (${ids.map(() => '?').join(', ')}) and ${live}
         order by "replay" desc, "due_at", "id" limit ?${this.pg ? ' for update skip locked' : ''})
         and ${live} returning "id"`,
      [o.owner, o.leaseUntilIso, ...ids, ...liveParams, limit, ...liveParams],
    );
    if (claimed.length === 0) return [];
    const rows = await all<DeliveryRow & { url: string; secret_sealed: string; payload: string }>(
      em,
      `select ${D_COLS}, e."url", e."secret_sealed", ev."payload" from "webhook_deliveries" d
       join "webhook_endpoints" e on e."id" = d."endpoint_id" join "webhook_events" ev on ev."id" = d."event_id"
       where d."id" in (${claimed.map(() => '?').join(', ')}) and d."lease_owner" = ?`,
      [...claimed.map((c) => c.id), o.owner],
    );
    return rows.map((r) => ({ ...toDelivery(r), url: r.url, secret_sealed: r.secret_sealed, payload: r.payload }));
  }

  async releaseClaim(id: string, owner: string): Promise<void> {
    await run(
      this.em(),
      `update "webhook_deliveries" set "lease_owner" = null, "lease_until" = null where "id" = ? and "lease_owner" = ? and "status" = 'pending'`,
      [id, owner],
    );
  }

  async completeAttempt(id: string, owner: string, o: AttemptOutcome): Promise<boolean> {
    return this.em().transactional(async (em) => {
      const rows = await all<DeliveryRow>(
        em,
        `update "webhook_deliveries" set "status" = ?, "response_status" = ?, "response_body" = ?, "duration_ms" = ?,
           "error" = ?, "attempted_at" = ?, "next_attempt_at" = ?, "lease_owner" = null, "lease_until" = null
         where "id" = ? and "lease_owner" = ? and "status" = 'pending'
         returning "id", "endpoint_id", "customer_id", "event_id", "event_type", "attempt_number", "replay"`,
        [
          o.status,
          o.response_status,
          o.response_body,
          o.duration_ms,
          o.error,
          o.attempted_at,
          o.next?.due_at ?? null,
          id,
          owner,
        ],
      );
      const r = rows[0];
      if (!r) return false;
      if (o.next)
        await insertAttempt(em, {
          event_id: r.event_id,
          event_type: r.event_type,
          endpoint_id: r.endpoint_id,
          customer_id: r.customer_id,
          attempt: num(r.attempt_number) + 1,
          due_at: o.next.due_at,
          created_at: o.attempted_at,
          replay: num(r.replay) === 1,
        });
      return true;
    });
  }

  async replayDeadLetters(customerId: string, ids: string[] | null, nowIso: string, max: number): Promise<number> {
    return this.em().transactional(async (em) => {
      // Dead letters whose endpoint still exists; the update marks each replayed exactly once.
      const rows = await all<DeliveryRow>(
        em,
        `update "webhook_deliveries" set "replayed_at" = ?
         where "id" in (select d."id" from "webhook_deliveries" d join "webhook_endpoints" e on e."id" = d."endpoint_id"
           where d."customer_id" = ? and d."status" = 'dead_lettered' and d."replayed_at" is null
           ${ids ? `and d."id" in (${ids.map(() => '?').join(', ')})` : ''}
           order by d."created_at", d."id" limit ?)
         returning "id", "endpoint_id", "customer_id", "event_id", "event_type", "attempt_number"`,
        [nowIso, customerId, ...(ids ?? []), max],
      );
      for (const r of rows)
        await insertAttempt(em, {
          event_id: r.event_id,
          event_type: r.event_type,
          endpoint_id: r.endpoint_id,
          customer_id: r.customer_id,
          attempt: num(r.attempt_number) + 1,
          due_at: nowIso,
          created_at: nowIso,
          replay: true,
        });
      return rows.length;
    });
  }

  async replayInProgressSince(customerId: string): Promise<string | null> {
    const r = await all<{ since: string | null }>(
      this.em(),
      `select min("created_at") as "since" from "webhook_deliveries" where "customer_id" = ? and "replay" = 1 and "status" = 'pending'`,
      [customerId],
    );
    return r[0]?.since ?? null;
  }

  async accountsReplaying(): Promise<string[]> {
    const r = await all<{ customer_id: string }>(
      this.em(),
      `select distinct "customer_id" from "webhook_deliveries" where "replay" = 1 and "status" = 'pending'`,
      [],
    );
    return r.map((x) => x.customer_id);
  }

  async prune(beforeIso: string): Promise<number> {
    return this.em().transactional(async (em) => {
      const a = await run(
        em,
        `delete from "webhook_deliveries" where "created_at" < ? and "status" in ('succeeded', 'failed')`,
        [beforeIso],
      );
      const b = await run(
        em,
        `delete from "webhook_events" where "created_at" < ? and not exists (select 1 from "webhook_deliveries" d where d."event_id" = "webhook_events"."id")`,
        [beforeIso],
      );
      return a + b;
    });
  }
}

function pageOf<T extends { created_at: string; id: string }>(rows: T[], limit: number): WebhookPage<T> {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, next_cursor: rows.length > limit && last ? `${last.created_at}|${last.id}` : null };
}
