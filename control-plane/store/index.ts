// Public entry of the storage adapter.
import type { Store } from '../domain/index.js';
import type { CapsulefileStore } from '../capsulefile/index.js';
import { SqlCapsulefileStore } from './capsulefile-store.js';
import { openOrm, type DbConfig } from './orm.js';
import { SqlStore } from './sql-store.js';

export type { DbConfig } from './orm.js';

/** Opens the database, applies migrations, returns the Store. */
export async function openStore(db: DbConfig): Promise<Store> {
  return new SqlStore(await openOrm(db));
}

/** Both stores over one database connection (closing `store` closes both). */
export async function openStores(db: DbConfig): Promise<{ store: Store; capsulefiles: CapsulefileStore }> {
  const orm = await openOrm(db);
  return { store: new SqlStore(orm), capsulefiles: new SqlCapsulefileStore(orm) };
}
