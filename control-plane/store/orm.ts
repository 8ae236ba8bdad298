// Opens MikroORM on the configured driver (SQLite file by default, PostgreSQL
// for a postgres URL) and applies the migrations in code before serving.
import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import { Migrator } from '@mikro-orm/migrations';
import type { MikroORM as CoreORM } from '@mikro-orm/core';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { ENTITIES } from './entities.js';
import { MIGRATIONS } from './migrations.js';
import { cacheStatements } from './statement-cache.js';
import { AUTOCHECKPOINT_PAGES, startCheckpointer } from './checkpointer.js';

export type DbConfig =
  { driver: 'sqlite'; file: string; synchronous?: 'full' | 'normal' } | { driver: 'postgresql'; url: string };
export type Orm = CoreORM & { em: SqlEntityManager };

export async function openOrm(db: DbConfig): Promise<Orm> {
  const common = {
    entities: ENTITIES,
    extensions: [Migrator],
    migrations: {
      migrationsList: MIGRATIONS,
      snapshot: false,
      snapshotOnMigrate: false,
      silent: true,
      tableName: 'schema_migrations',
    },
    debug: false,
    allowGlobalContext: false,
    ensureDatabase: false,
  };
  let orm: Orm;
  let wal = false;
  if (db.driver === 'sqlite') {
    mkdirSync(dirname(db.file), { recursive: true, mode: 0o700 });
    const { MikroORM } = await import('@mikro-orm/libsql');
    orm = (await MikroORM.init({ ...common, dbName: db.file })) as unknown as Orm;
    // WAL + a busy timeout let the sweeper and requests share the file.
    const mode = await orm.em
      .getConnection()
      .execute<{ journal_mode: string }[]>('pragma journal_mode = wal', [], 'all');
    wal = mode[0]?.journal_mode === 'wal'; // not for an in-memory database
    await orm.em.getConnection().execute('pragma busy_timeout = 5000', [], 'all');
    // WAL + NORMAL: a commit survives a process crash (SIGKILL) but the last
    // commits may roll back on power loss; FULL syncs every commit (slower).
    await orm.em
      .getConnection()
      .execute(`pragma synchronous = ${db.synchronous === 'full' ? 'full' : 'normal'}`, [], 'all');
    await orm.em.getConnection().execute('pragma foreign_keys = on', [], 'all');
  } else {
    const { MikroORM } = await import('@mikro-orm/postgresql');
    orm = (await MikroORM.init({ ...common, clientUrl: db.url, pool: { min: 0, max: 10 } })) as unknown as Orm;
  }
  await orm.migrator.up();
  if (db.driver === 'sqlite') {
    const native = (await orm.em.getConnection().getNativeClient()) as Parameters<typeof cacheStatements>[0];
    cacheStatements(native);
    if (wal) await checkpointOffThread(orm, db.file, db.synchronous === 'full' ? 'full' : 'normal');
  }
  return orm;
}

/**
 * Checkpoints in a worker thread (checkpointer.ts) instead of inside the
 * commits of this connection. Every close of the ORM (SqlStore.close, the
 * benches) stops the worker first, so neither its thread nor its connection
 * outlives the store.
 */
async function checkpointOffThread(orm: Orm, file: string, synchronous: 'full' | 'normal'): Promise<void> {
  const conn = orm.em.getConnection();
  await conn.execute('pragma wal_autocheckpoint = 0', [], 'all');
  const worker = startCheckpointer(file, synchronous, (why) => {
    // WARNING: without it the WAL would grow without bound.
    process.emitWarning(`SQLite checkpointer stopped (${why}): checkpoints are back in commits`);
    conn.execute(`pragma wal_autocheckpoint = ${AUTOCHECKPOINT_PAGES}`, [], 'all').catch(() => {});
  });
  const close = orm.close.bind(orm);
  orm.close = async (force?: boolean) => {
    await worker.stop();
    await close(force);
  };
}
