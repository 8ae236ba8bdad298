// Public entry of the storage adapter.
import type { Store } from '../domain/index.js';
import { openOrm, type DbConfig } from './orm.js';
import { SqlStore } from './sql-store.js';

export type { DbConfig } from './orm.js';

/** Opens the database, applies migrations, returns the Store. */
export async function openStore(db: DbConfig): Promise<Store> {
  return new SqlStore(await openOrm(db));
}
