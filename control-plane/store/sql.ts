// Small helpers the three SQL stores share: raw statements inside the
// caller's transaction, the live-capsule count behind every "in use" check,
// and keyset paging over (created_at, id).
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import { BaseSqliteConnection, type SqlEntityManager } from '@mikro-orm/sql';
import { CompiledQuery, type Kysely, type QueryResult } from 'kysely';
import { LIVE_STATUSES } from '../domain/index.js';

/** Drivers return integers as number, bigint or string: one conversion. */
export const num = (v: unknown): number => Number(v);

/**
 * On SQLite, a statement with `?` placeholders and its values bound, through
 * the same Kysely executor (and so the same transaction and connection mutex)
 * MikroORM uses. MikroORM's own execute() inlines the values into the text,
 * which makes every text unique and unpreparable ahead (statement-cache.ts).
 * undefined on PostgreSQL, whose driver wants `$n` placeholders.
 */
async function sqliteBound(
  em: SqlEntityManager,
  sql: string,
  params: unknown[],
): Promise<QueryResult<unknown> | undefined> {
  const conn = em.getConnection();
  if (!(conn instanceof BaseSqliteConnection)) return undefined;
  // SQLite binds numbers, strings, bigints, buffers and null: booleans as 0/1, as MikroORM writes them.
  const values = params.map((v) => (typeof v === 'boolean' ? (v ? 1 : 0) : v === undefined ? null : v));
  const executor = (em.getTransactionContext<Kysely<unknown>>() ?? conn.getClient()) as Kysely<unknown>;
  return executor.executeQuery(CompiledQuery.raw(sql, values));
}

/** Runs a statement in `em`'s transaction (if any); the number of rows it changed. */
export async function run(em: SqlEntityManager, sql: string, params: unknown[]): Promise<number> {
  const bound = await sqliteBound(em, sql, params);
  if (bound) return num(bound.numAffectedRows ?? 0);
  const res = (await em.getConnection().execute(sql, params, 'run', em.getTransactionContext())) as {
    affectedRows?: number;
    rowCount?: number;
  };
  return num(res.affectedRows ?? res.rowCount ?? 0);
}

/** Runs a query in `em`'s transaction (if any). */
export async function all<T>(em: SqlEntityManager, sql: string, params: unknown[]): Promise<T[]> {
  const bound = await sqliteBound(em, sql, params);
  if (bound) return bound.rows as T[];
  return (await em.getConnection().execute(sql, params, 'all', em.getTransactionContext())) as T[];
}

/** A unique or primary-key violation from either driver, as the exception MikroORM's own writes throw. */
function uniqueViolation(e: unknown): unknown {
  const code = (e as { code?: unknown } | null)?.code;
  return code === '23505' || code === 'SQLITE_CONSTRAINT_UNIQUE' || code === 'SQLITE_CONSTRAINT_PRIMARYKEY'
    ? new UniqueConstraintViolationException(e as Error)
    : e;
}

/**
 * INSERT of one row with every value bound. MikroORM's insert inlines the
 * values into its text (a proof record, tens of KB, parsed as SQL), so every
 * text was new and prepared afresh; this text depends only on the table and
 * the row's keys and is prepared once (statement-cache.ts). Table and column
 * names come from code, never from a request.
 */
export async function insertRow(em: SqlEntityManager, table: string, row: Record<string, unknown>): Promise<void> {
  const cols = Object.keys(row);
  try {
    await run(
      em,
      `insert into "${table}" (${cols.map((c) => `"${c}"`).join(', ')}) values (${cols.map(() => '?').join(', ')})`,
      Object.values(row),
    );
  } catch (e) {
    throw uniqueViolation(e);
  }
}

/** Live capsules naming the row in `column`; call after locking that row so none can start meanwhile. */
export async function liveUsers(
  em: SqlEntityManager,
  column: 'capsulefile_id' | 'egress_profile_id',
  id: string,
): Promise<number> {
  const rows = await all<{ n: unknown }>(
    em,
    `select count(*) as "n" from "capsules" where "${column}" = ? and "status" in (${LIVE_STATUSES.map(() => '?').join(', ')})`,
    [id, ...LIVE_STATUSES],
  );
  return num(rows[0]?.n ?? 0);
}

/** Keyset condition: rows after the cursor `created_at|id` in the given direction. */
export function after(cursor: string | null, dir: 'asc' | 'desc'): Record<string, unknown> {
  if (!cursor) return {};
  const [at, id] = cursor.split('|');
  const op = dir === 'asc' ? '$gt' : '$lt';
  return { $or: [{ created_at: { [op]: at } }, { created_at: at, id: { [op]: id } }] };
}

/** One page of `limit` from `limit + 1` fetched rows; the cursor is the last row's (created_at, id). */
export function page<T extends { created_at: string; id: string }>(
  rows: T[],
  limit: number,
): { items: T[]; next_cursor: string | null } {
  const items = rows.slice(0, limit);
  const last = items[items.length - 1];
  return { items, next_cursor: rows.length > limit && last ? `${last.created_at}|${last.id}` : null };
}
