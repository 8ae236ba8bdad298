// The Store port over MikroORM. Counters move only through single conditional
// UPDATE statements (atomic on both drivers), unique violations become
// resource_conflict where they happen.
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { ApiError } from '../../shared/errors.js';
import type { ActivityEvent } from '../../shared/proof/index.js';
import type {
  ActivityDrops,
  ActivitySide,
  Account,
  Caller,
  Capsule,
  InsertCapsuleOutcome,
  CapsulePage,
  CapsuleStatus,
  ContactMessage,
  Destruction,
  IdempotencyClaim,
  IdempotentResponse,
  KeyRecord,
  Limits,
  NewAccount,
  OutboxEvent,
  PendingProof,
  ReserveOutcome,
  Store,
  StoredProof,
  Tier,
  UsageEntry,
} from '../domain/index.js';
import {
  AccountEntity,
  ActivityEntity,
  ContactEntity,
  ApiKeyEntity,
  CapsuleEntity,
  IdempotencyEntity,
  KeyEntity,
  ProofEntity,
  type AccountRow,
  type CapsuleRow,
  type ProofRow,
} from './entities.js';
import type { Orm } from './orm.js';
import { after, all, insertRow, num, page, run } from './sql.js';
import { MIGRATIONS } from './migrations.js';
import { insertUsage } from './usage-store.js';
import { insertOutbox } from './webhook-store.js';
import { LIVE_STATUSES } from '../domain/index.js';

function toAccount(r: AccountRow): Account {
  return {
    customer_id: r.customer_id,
    email: r.email,
    tier: r.tier as Tier,
    jurisdiction: r.jurisdiction as Account['jurisdiction'],
    created_at: r.created_at,
    billing_cycle_start: r.billing_cycle_start,
    capsules_used_this_month: num(r.capsules_used),
    cdps_this_cycle: num(r.cdps_used),
    live_capsules: num(r.live_capsules),
  };
}

export function toCapsule(r: CapsuleRow): Capsule {
  return {
    id: r.id,
    customer_id: r.customer_id,
    status: r.status as CapsuleStatus,
    api_form: r.api_form as Capsule['api_form'],
    ttl_seconds: num(r.ttl_seconds),
    created_at: r.created_at,
    expires_at: r.expires_at,
    data_classification: r.data_classification as Capsule['data_classification'],
    jurisdiction: r.jurisdiction as Capsule['jurisdiction'],
    capsulefile_id: r.capsulefile_id,
    capsulefile_content_hash: r.capsulefile_content_hash ?? null,
    egress_profile_id: r.egress_profile_id ?? null,
    metadata: JSON.parse(r.metadata) as Record<string, string>,
    execution_count: num(r.execution_count),
    bytes_processed: num(r.bytes_processed),
    destroyed_at: r.destroyed_at,
    billable: num(r.billable) === 1,
  };
}

function toProof(r: ProofRow): StoredProof {
  return {
    proof_id: r.proof_id,
    capsule_id: r.capsule_id,
    customer_id: r.customer_id,
    record: JSON.parse(r.record) as Record<string, unknown>,
    response: r.response === null ? null : (JSON.parse(r.response) as Record<string, unknown>),
    partial: num(r.partial) === 1,
    created_at: r.created_at,
  };
}

interface PendingRow {
  capsule_id: string;
  customer_id: string;
  proof_id: string;
  partial: unknown;
  billable: unknown;
  input: string;
  response: string | null;
  created_at: string;
  signed_at: string | null;
}

function toPending(r: PendingRow): PendingProof {
  return {
    capsule_id: r.capsule_id,
    customer_id: r.customer_id,
    proof_id: r.proof_id,
    partial: num(r.partial) === 1,
    billable: num(r.billable) === 1,
    input: JSON.parse(r.input) as Record<string, unknown>,
    response: r.response === null ? null : (JSON.parse(r.response) as Record<string, unknown>),
    created_at: r.created_at,
    signed_at: r.signed_at,
  };
}

function conflict(e: unknown, message: string): never {
  if (e instanceof UniqueConstraintViolationException) throw new ApiError('resource_conflict', message, { cause: e });
  throw e;
}

/** Moves a capsule out of one of `from`, setting `set` (status and any other columns); rows changed, 0 or 1. */
function moveCapsule(
  em: SqlEntityManager,
  id: string,
  from: readonly CapsuleStatus[],
  set: Partial<CapsuleRow>,
): Promise<number> {
  const cols = Object.keys(set);
  return run(
    em,
    `update "capsules" set ${cols.map((c) => `"${c}" = ?`).join(', ')} where "id" = ? and "status" in (${from.map(() => '?').join(', ')})`,
    [...Object.values(set), id, ...from],
  );
}

export class SqlStore implements Store {
  /** Rate-window counts made by this process (pruning cadence). */
  private rateHits = 0;
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }
  private run(sql: string, params: unknown[], em: SqlEntityManager = this.em()): Promise<number> {
    return run(em, sql, params);
  }

  async ping(): Promise<void> {
    await this.em().getConnection().execute('select 1 as ok', [], 'all');
  }

  async queueDepths(): Promise<{ unsigned_proofs: number; webhook_deliveries_pending: number }> {
    const rows = await all<{ p: unknown; w: unknown }>(
      this.em(),
      `select (select count(*) from "pending_proofs" where "signed_at" is null) as "p",
              (select count(*) from "webhook_deliveries" where "status" = 'pending') as "w"`,
      [],
    );
    return { unsigned_proofs: num(rows[0]?.p ?? 0), webhook_deliveries_pending: num(rows[0]?.w ?? 0) };
  }

  async pendingMigrations(): Promise<string[]> {
    const rows = await all<{ name: string }>(this.em(), 'select "name" from "schema_migrations"', []);
    const done = new Set(rows.map((r) => r.name));
    return MIGRATIONS.map((m) => m.name).filter((n) => !done.has(n));
  }
  async close(): Promise<void> {
    await this.orm.close(true);
  }

  // ---- accounts
  async createAccount(a: NewAccount): Promise<Account> {
    const row: AccountRow = {
      customer_id: a.customer_id,
      email: a.email,
      tier: a.tier,
      jurisdiction: a.jurisdiction,
      created_at: a.created_at,
      billing_cycle_start: a.billing_cycle_start,
      capsules_used: 0,
      cdps_used: 0,
      live_capsules: 0,
    };
    try {
      await this.em().transactional(async (em) => {
        await em.insert(AccountEntity, row);
        await em.insert(ApiKeyEntity, {
          key_hash: a.key_hash,
          customer_id: a.customer_id,
          mode: a.key_mode,
          created_at: a.created_at,
          revoked: 0,
          id: a.key_id,
          prefix: a.key_prefix,
          last_used_at: null,
          revoked_at: null,
          mfa_verified_until: null,
        });
      });
    } catch (e) {
      conflict(e, 'email: an account with this email already exists');
    }
    return toAccount(row);
  }

  async findCallerByKeyHash(hash: string, nowIso: string, touchBeforeIso: string): Promise<Caller | null> {
    // One round trip per authenticated request (a second, rare one refreshes last_used_at).
    const rows = await all<
      AccountRow & {
        k_id: string;
        k_mode: string;
        k_last_used_at: string | null;
        k_mfa_until: string | null;
        mfa_state: string | null;
      }
    >(
      this.em(),
      `select a.*, k."id" as "k_id", k."mode" as "k_mode", k."last_used_at" as "k_last_used_at",
         k."mfa_verified_until" as "k_mfa_until", m."state" as "mfa_state"
       from "api_keys" k join "accounts" a on a."customer_id" = k."customer_id"
       left join "mfa_factors" m on m."customer_id" = k."customer_id"
       where k."key_hash" = ? and k."revoked" = 0 and (k."revoked_at" is null or k."revoked_at" > ?)`,
      [hash, nowIso],
    );
    const r = rows[0];
    if (!r) return null;
    if (r.k_last_used_at === null || r.k_last_used_at < touchBeforeIso)
      await this.run('update "api_keys" set "last_used_at" = ? where "key_hash" = ?', [nowIso, hash]);
    return {
      account: toAccount(r),
      key_mode: r.k_mode === 'test' ? 'test' : 'live',
      key_id: r.k_id,
      mfa: r.mfa_state === 'active' ? 'active' : r.mfa_state === 'pending' ? 'pending' : 'none',
      mfa_verified_until: r.k_mfa_until,
    };
  }

  async getAccount(customerId: string): Promise<Account | null> {
    const r = await this.em().findOne(AccountEntity, { customer_id: customerId });
    return r ? toAccount(r) : null;
  }

  async setTierByEmail(email: string, tier: Tier): Promise<boolean> {
    return (await this.em().nativeUpdate(AccountEntity, { email }, { tier })) > 0;
  }

  async refreshCycle(customerId: string, cycleStart: string): Promise<Account | null> {
    await this.rollCycle(customerId, cycleStart);
    return this.getAccount(customerId);
  }

  private async rollCycle(customerId: string, cycleStart: string, em?: SqlEntityManager): Promise<void> {
    await this.run(
      'update "accounts" set "billing_cycle_start" = ?, "capsules_used" = 0, "cdps_used" = 0 where "customer_id" = ? and "billing_cycle_start" < ?',
      [cycleStart, customerId, cycleStart],
      em,
    );
  }

  async reserveCapsule(
    customerId: string,
    limits: Limits,
    cycleStart: string,
    billable: boolean,
    onCount?: (before: number, after: number) => OutboxEvent[],
  ): Promise<ReserveOutcome> {
    const BIG = Number.MAX_SAFE_INTEGER;
    const monthly = limits.capsules_per_month ?? BIG;
    const live = limits.concurrent_capsules ?? BIG;
    const cdps = limits.cdp_limit ?? BIG;
    return this.em().transactional(async (em) => {
      await this.rollCycle(customerId, cycleStart, em);
      // A test-key capsule takes a live slot only.
      if (!billable) {
        const t = await this.run(
          'update "accounts" set "live_capsules" = "live_capsules" + 1 where "customer_id" = ? and "live_capsules" < ?',
          [customerId, live],
          em,
        );
        return t === 1 ? 'ok' : 'concurrent_capsules';
      }
      const moved = await all<{ capsules_used: unknown }>(
        em,
        `update "accounts" set "capsules_used" = "capsules_used" + 1, "live_capsules" = "live_capsules" + 1
         where "customer_id" = ? and "capsules_used" < ? and "live_capsules" < ? and "cdps_used" < ?
         returning "capsules_used"`,
        [customerId, monthly, live, cdps],
      );
      if (moved.length === 1) {
        const used = num(moved[0]!.capsules_used);
        if (onCount) await insertOutbox(em, onCount(used - 1, used));
        return 'ok';
      }
      const r = await em.findOne(AccountEntity, { customer_id: customerId });
      if (!r) return 'capsules_per_month';
      if (num(r.cdps_used) >= cdps) return 'cdp_limit';
      if (num(r.capsules_used) >= monthly) return 'capsules_per_month';
      return 'concurrent_capsules';
    });
  }

  async releaseLive(customerId: string): Promise<void> {
    await this.run(
      'update "accounts" set "live_capsules" = "live_capsules" - 1 where "customer_id" = ? and "live_capsules" > 0',
      [customerId],
    );
  }

  async unreserveCapsule(customerId: string, billable: boolean): Promise<void> {
    if (!billable) return this.releaseLive(customerId);
    await this.run(
      `update "accounts" set "live_capsules" = case when "live_capsules" > 0 then "live_capsules" - 1 else 0 end,
       "capsules_used" = case when "capsules_used" > 0 then "capsules_used" - 1 else 0 end where "customer_id" = ?`,
      [customerId],
    );
  }

  // ---- capsules
  async insertCapsule(
    c: Capsule,
    first: { type: string; at: string; fields: Record<string, unknown> },
    usage: UsageEntry,
    events: OutboxEvent[] = [],
    idempotencyKey?: string,
  ): Promise<InsertCapsuleOutcome> {
    const row: CapsuleRow = {
      id: c.id,
      customer_id: c.customer_id,
      status: c.status,
      api_form: c.api_form,
      ttl_seconds: c.ttl_seconds,
      created_at: c.created_at,
      expires_at: c.expires_at,
      data_classification: c.data_classification,
      jurisdiction: c.jurisdiction,
      capsulefile_id: c.capsulefile_id,
      metadata: JSON.stringify(c.metadata),
      execution_count: c.execution_count,
      bytes_processed: c.bytes_processed,
      destroyed_at: c.destroyed_at,
      billable: c.billable ? 1 : 0,
      activity_seq: 0,
      capsulefile_content_hash: c.capsulefile_content_hash,
      egress_profile_id: c.egress_profile_id,
    };
    try {
      return await this.em().transactional(async (em) => {
        // The no-op UPDATEs take the same row locks as the DELETEs of the Capsulefile
        // and the profile, which count live capsules after locking: either the delete
        // committed first (the row is gone here) or it sees this capsule.
        if (
          c.capsulefile_id !== null &&
          (await this.run(
            `update "capsulefiles" set "status" = "status" where "id" = ? and "status" = 'finalized'`,
            [c.capsulefile_id],
            em,
          )) !== 1
        ) {
          return 'capsulefile_gone';
        }
        if (
          c.egress_profile_id !== null &&
          (await this.run('update "egress_profiles" set "name" = "name" where "id" = ?', [c.egress_profile_id], em)) !==
            1
        ) {
          return 'egress_profile_gone';
        }
        await insertRow(em, 'capsules', { ...row, activity_seq: 1 });
        await insertRow(em, 'activity_events', {
          capsule_id: c.id,
          seq: 1,
          type: first.type,
          at: first.at,
          fields: JSON.stringify(first.fields),
        });
        await insertUsage(em, usage, c.customer_id, c.id, c.billable);
        await insertOutbox(em, events);
        if (idempotencyKey !== undefined)
          await this.run(
            'update "idempotency_keys" set "resource_id" = ? where "customer_id" = ? and "idem_key" = ?',
            [c.id, c.customer_id, idempotencyKey],
            em,
          );
        return 'ok';
      });
    } catch (e) {
      conflict(e, 'id: capsule id already exists');
    }
  }

  async getCapsule(id: string): Promise<Capsule | null> {
    // Read on nearly every request: a plain row, not a tracked entity (the ORM's findOne cost about 0.3 ms more).
    const [r] = await all<CapsuleRow>(this.em(), 'select * from "capsules" where "id" = ?', [id]);
    return r ? toCapsule(r) : null;
  }

  async listCapsules(customerId: string, limit: number, cursor: string | null): Promise<CapsulePage> {
    // Keyset paging, newest first; the cursor is the last row's (created_at, id).
    const rows = await this.em().find(CapsuleEntity, { customer_id: customerId, ...after(cursor, 'desc') } as never, {
      orderBy: { created_at: 'desc', id: 'desc' },
      limit: limit + 1,
    });
    return page(rows.map(toCapsule), limit);
  }

  async transition(
    id: string,
    from: readonly CapsuleStatus[],
    to: CapsuleStatus,
    destroyedAt?: string,
  ): Promise<boolean> {
    const set: Partial<CapsuleRow> = { status: to };
    if (destroyedAt !== undefined) set.destroyed_at = destroyedAt;
    return (await moveCapsule(this.em(), id, from, set)) > 0;
  }

  async addUsage(id: string, executions: number, bytes: number, usage?: UsageEntry): Promise<void> {
    await this.em().transactional(async (em) => {
      const rows = await all<{ customer_id: string; billable: unknown }>(
        em,
        'update "capsules" set "execution_count" = "execution_count" + ?, "bytes_processed" = "bytes_processed" + ? where "id" = ? returning "customer_id", "billable"',
        [executions, bytes, id],
      );
      const r = rows[0];
      if (r && usage) await insertUsage(em, usage, r.customer_id, id, num(r.billable) === 1);
    });
  }

  async liveCapsules(): Promise<Capsule[]> {
    return (await this.em().find(CapsuleEntity, { status: { $in: [...LIVE_STATUSES] } })).map(toCapsule);
  }

  async expiredLiveCapsules(nowIso: string): Promise<Capsule[]> {
    return (
      await this.em().find(
        CapsuleEntity,
        { status: { $in: [...LIVE_STATUSES] }, expires_at: { $lte: nowIso } },
        { orderBy: { expires_at: 'asc' }, limit: 100 },
      )
    ).map(toCapsule);
  }

  // ---- activity
  async appendActivity(
    capsuleId: string,
    type: string,
    at: string,
    fields: Record<string, unknown>,
    side: ActivitySide = {},
  ): Promise<ActivityEvent | null> {
    // The seq counter row is locked by the UPDATE until commit: exact order under concurrency.
    return this.em().transactional(async (em) => {
      // UPDATE ... RETURNING (SQLite 3.35+, PostgreSQL): one statement moves and reads the counter.
      // Under the cap (if any) the counter moves; at the cap the event is counted as dropped instead.
      const rows = await all<{ activity_seq: number; customer_id: string; billable: unknown }>(
        em,
        'update "capsules" set "activity_seq" = "activity_seq" + 1, "execution_count" = "execution_count" + ?, "bytes_processed" = "bytes_processed" + ? where "id" = ?' +
          (side.cap !== undefined ? ' and "activity_seq" < ?' : '') +
          ' returning "activity_seq", "customer_id", "billable"',
        [side.executions ?? 0, side.bytes ?? 0, capsuleId, ...(side.cap !== undefined ? [side.cap] : [])],
      );
      let row = rows[0];
      let stored = true;
      if (rows.length !== 1 && side.cap !== undefined) {
        const dropped = await all<{ activity_seq: number; customer_id: string; billable: unknown }>(
          em,
          'update "capsules" set "activity_dropped" = "activity_dropped" + 1, "activity_first_dropped" = coalesce("activity_first_dropped", ?), "execution_count" = "execution_count" + ?, "bytes_processed" = "bytes_processed" + ? where "id" = ? returning "activity_seq", "customer_id", "billable"',
          [type, side.executions ?? 0, side.bytes ?? 0, capsuleId],
        );
        row = dropped[0];
        stored = false;
      }
      if (!row) throw new ApiError('resource_not_found', 'capsule not found');
      const seq = num(row.activity_seq);
      if (stored)
        await insertRow(em, 'activity_events', {
          capsule_id: capsuleId,
          seq,
          type,
          at,
          fields: JSON.stringify(fields),
        });
      if (side.usage) await insertUsage(em, side.usage, row.customer_id, capsuleId, num(row.billable) === 1);
      if (side.move) await moveCapsule(em, capsuleId, side.move.from, { status: side.move.to });
      return stored ? { seq, type, at, ...fields } : null;
    });
  }

  async activity(capsuleId: string): Promise<ActivityEvent[]> {
    const rows = await this.em().find(ActivityEntity, { capsule_id: capsuleId }, { orderBy: { seq: 'asc' } });
    return rows.map((r) => ({
      seq: num(r.seq),
      type: r.type,
      at: r.at,
      ...(JSON.parse(r.fields) as Record<string, unknown>),
    }));
  }

  async activityPage(capsuleId: string, afterSeq: number, limit: number): Promise<ActivityEvent[]> {
    // Raw rows: no entity hydration or identity map for what may be a very long trail.
    const rows = await all<{ seq: unknown; type: string; at: string; fields: string }>(
      this.em(),
      'select "seq", "type", "at", "fields" from "activity_events" where "capsule_id" = ? and "seq" > ? order by "seq" limit ?',
      [capsuleId, afterSeq, limit],
    );
    return rows.map((r) => ({
      seq: num(r.seq),
      type: r.type,
      at: r.at,
      ...(JSON.parse(r.fields) as Record<string, unknown>),
    }));
  }

  async activityDrops(capsuleId: string): Promise<ActivityDrops> {
    const rows = await all<{ activity_dropped: unknown; activity_first_dropped: string | null }>(
      this.em(),
      'select "activity_dropped", "activity_first_dropped" from "capsules" where "id" = ?',
      [capsuleId],
    );
    const r = rows[0];
    return { dropped_events: r ? num(r.activity_dropped) : 0, first_dropped_type: r?.activity_first_dropped ?? null };
  }

  // ---- proofs and keys
  async insertProof(p: StoredProof, billable: boolean): Promise<void> {
    try {
      await this.em().transactional((em) => this.writeProof(em, p, null, billable));
    } catch (e) {
      conflict(e, 'capsule_id: a proof for this capsule already exists');
    }
  }

  async getProofByCapsule(capsuleId: string): Promise<StoredProof | null> {
    const r = await this.em().findOne(ProofEntity, { capsule_id: capsuleId });
    return r ? toProof(r) : null;
  }

  async insertKey(k: KeyRecord): Promise<void> {
    try {
      await this.em().insert(KeyEntity, {
        key_id: k.key_id,
        public_key: k.public_key,
        created_at: k.created_at,
        signing_authority_id: k.signing_authority_id,
        signing_key_version: k.signing_key_version,
      });
    } catch (e) {
      conflict(e, 'key_id: already registered');
    }
  }

  async getKey(keyId: string): Promise<KeyRecord | null> {
    const r = await this.em().findOne(KeyEntity, { key_id: keyId });
    return r
      ? {
          key_id: r.key_id,
          algorithm: 'Ed25519',
          public_key: r.public_key,
          created_at: r.created_at,
          signing_authority_id: r.signing_authority_id,
          signing_key_version: num(r.signing_key_version),
        }
      : null;
  }

  /** The proof row, its usage item (when given) and the account's proof count: written together, once. */
  private async writeProof(
    em: SqlEntityManager,
    p: StoredProof,
    usage: UsageEntry | null,
    billable: boolean,
  ): Promise<void> {
    await insertRow(em, 'proofs', {
      proof_id: p.proof_id,
      capsule_id: p.capsule_id,
      customer_id: p.customer_id,
      record: JSON.stringify(p.record),
      response: p.response === null ? null : JSON.stringify(p.response),
      partial: p.partial ? 1 : 0,
      created_at: p.created_at,
    });
    if (billable)
      await this.run(
        'update "accounts" set "cdps_used" = "cdps_used" + 1 where "customer_id" = ?',
        [p.customer_id],
        em,
      );
    if (usage) await insertUsage(em, usage, p.customer_id, p.capsule_id, billable);
  }

  async recordDestruction(d: Destruction): Promise<void> {
    try {
      await this.em().transactional(async (em) => {
        if (d.key) {
          await insertRow(em, 'signing_keys', {
            key_id: d.key.key_id,
            public_key: d.key.public_key,
            created_at: d.key.created_at,
            signing_authority_id: d.key.signing_authority_id,
            signing_key_version: d.key.signing_key_version,
          });
        }
        if (d.proof && d.usage) await this.writeProof(em, d.proof, d.usage, d.capsule.billable);
        const q = d.pending;
        if (q)
          await this.run(
            `insert into "pending_proofs" ("capsule_id", "customer_id", "proof_id", "partial", "billable", "input", "response", "created_at", "signed_at")
             values (?, ?, ?, ?, ?, ?, ?, ?, null)`,
            [
              q.capsule_id,
              q.customer_id,
              q.proof_id,
              q.partial ? 1 : 0,
              q.billable ? 1 : 0,
              JSON.stringify(q.input),
              q.response === null ? null : JSON.stringify(q.response),
              q.created_at,
            ],
            em,
          );
        const set: Partial<CapsuleRow> = { status: d.status };
        if (d.destroyed_at !== null) set.destroyed_at = d.destroyed_at;
        const moved = await moveCapsule(em, d.capsule.id, d.from, set);
        if (moved !== 1) throw new ApiError('resource_conflict', 'capsule already destroyed');
        // Several runners: the capsule no longer occupies its runner.
        await this.run('delete from "capsule_placements" where "capsule_id" = ?', [d.capsule.id], em);
        await insertOutbox(em, d.events ?? []);
        await this.run(
          'update "accounts" set "live_capsules" = "live_capsules" - 1 where "customer_id" = ? and "live_capsules" > 0',
          [d.capsule.customer_id],
          em,
        );
      });
    } catch (e) {
      conflict(e, 'capsule already destroyed');
    }
  }

  async claimLease(name: string, owner: string, nowIso: string, untilIso: string): Promise<boolean> {
    const em = this.em();
    await this.run(
      'insert into "leases" ("name", "owner", "until") values (?, ?, ?) on conflict ("name") do nothing',
      [name, owner, untilIso],
      em,
    );
    // One statement decides: free (expired) or already ours.
    const held = await this.run(
      'update "leases" set "owner" = ?, "until" = ? where "name" = ? and ("owner" = ? or "until" < ?)',
      [owner, untilIso, name, owner, nowIso],
      em,
    );
    return held === 1;
  }

  async releaseLease(name: string, owner: string): Promise<void> {
    await this.run('update "leases" set "until" = ? where "name" = ? and "owner" = ?', ['', name, owner]);
  }

  async countRateHit(key: string, windowStartMs: number): Promise<number> {
    const em = this.em();
    const rows = await all<{ count: unknown }>(
      em,
      `insert into "rate_windows" ("key", "window_start", "count") values (?, ?, 1)
       on conflict ("key", "window_start") do update set "count" = "rate_windows"."count" + 1 returning "count"`,
      [key, windowStartMs],
    );
    // Old windows go now and then (every 500th count of this process), so the table stays small.
    if (++this.rateHits % 500 === 0)
      await this.run('delete from "rate_windows" where "window_start" < ?', [windowStartMs - 120_000], em);
    return num(rows[0]?.count ?? 0);
  }

  async getPendingProof(capsuleId: string): Promise<PendingProof | null> {
    const rows = await all<PendingRow>(this.em(), 'select * from "pending_proofs" where "capsule_id" = ?', [capsuleId]);
    return rows[0] ? toPending(rows[0]) : null;
  }

  async unsignedProofs(limit: number): Promise<PendingProof[]> {
    const rows = await all<PendingRow>(
      this.em(),
      'select * from "pending_proofs" where "signed_at" is null order by "created_at", "capsule_id" limit ?',
      [limit],
    );
    return rows.map(toPending);
  }

  async completePendingProof(
    p: PendingProof,
    proof: StoredProof,
    usage: UsageEntry,
    events: OutboxEvent[],
  ): Promise<boolean> {
    return this.em().transactional(async (em) => {
      // The claim: exactly one process moves the row from unsigned to signed.
      const claimed = await this.run(
        'update "pending_proofs" set "signed_at" = ? where "capsule_id" = ? and "signed_at" is null',
        [proof.created_at, p.capsule_id],
        em,
      );
      if (claimed !== 1) return false;
      await this.writeProof(em, proof, usage, p.billable);
      await insertOutbox(em, events);
      return true;
    });
  }

  async insertContact(c: ContactMessage): Promise<void> {
    await this.em().insert(ContactEntity, c);
  }

  // ---- idempotency
  async claimIdempotency(
    customerId: string,
    key: string,
    requestHash: string,
    nowIso: string,
    notBeforeIso: string,
    staleBeforeIso: string,
  ): Promise<IdempotencyClaim> {
    const em = this.em();
    // Entries older than the replay window are forgotten.
    await em.nativeDelete(IdempotencyEntity, {
      customer_id: customerId,
      idem_key: key,
      created_at: { $lt: notBeforeIso },
    });
    try {
      await em.insert(IdempotencyEntity, {
        customer_id: customerId,
        idem_key: key,
        request_hash: requestHash,
        state: 'pending',
        status: null,
        body: null,
        headers: null,
        created_at: nowIso,
        renewed_at: nowIso,
        resource_id: null,
      });
      return { state: 'claimed' };
    } catch (e) {
      if (!(e instanceof UniqueConstraintViolationException)) throw e;
    }
    const r = await this.em().findOne(IdempotencyEntity, { customer_id: customerId, idem_key: key });
    if (!r) return { state: 'pending' };
    if (r.state === 'pending') {
      const renewed = r.renewed_at ?? r.created_at;
      if (renewed >= staleBeforeIso) return { state: 'pending' };
      // Its request's process died: one retry takes it over (the renewal it read must still be there).
      const taken = await this.run(
        `update "idempotency_keys" set "renewed_at" = ? where "customer_id" = ? and "idem_key" = ?
         and "state" = 'pending' and coalesce("renewed_at", "created_at") = ?`,
        [nowIso, customerId, key, renewed],
        em,
      );
      return taken === 1
        ? { state: 'claimed', resource_id: r.resource_id ?? null, request_hash: r.request_hash }
        : { state: 'pending' };
    }
    if (r.status === null) return { state: 'pending' };
    return {
      state: 'done',
      request_hash: r.request_hash,
      response: {
        status: num(r.status),
        body: r.body ?? '',
        headers: JSON.parse(r.headers ?? '{}') as Record<string, string>,
      },
    };
  }

  async renewIdempotency(customerId: string, key: string, nowIso: string): Promise<void> {
    await this.run(
      `update "idempotency_keys" set "renewed_at" = ? where "customer_id" = ? and "idem_key" = ? and "state" = 'pending'`,
      [nowIso, customerId, key],
    );
  }

  async completeIdempotency(customerId: string, key: string, response: IdempotentResponse): Promise<void> {
    await this.em().nativeUpdate(
      IdempotencyEntity,
      { customer_id: customerId, idem_key: key },
      { state: 'done', status: response.status, body: response.body, headers: JSON.stringify(response.headers) },
    );
  }

  async releaseIdempotency(customerId: string, key: string): Promise<void> {
    await this.em().nativeDelete(IdempotencyEntity, { customer_id: customerId, idem_key: key, state: 'pending' });
  }
}
