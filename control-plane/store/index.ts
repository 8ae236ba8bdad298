// Public entry of the storage adapter.
import type { EgressProfileStore, Store } from '../domain/index.js';
import type { CapsulefileStore } from '../capsulefile/index.js';
import { SqlCapsulefileStore } from './capsulefile-store.js';
import { SqlEgressProfileStore } from './egress-store.js';
import { openOrm, type DbConfig } from './orm.js';
import { SqlStore } from './sql-store.js';

export type { DbConfig } from './orm.js';

/** Opens the database, applies migrations, returns the Store. */
export async function openStore(db: DbConfig): Promise<Store> {
  return new SqlStore(await openOrm(db));
}

/** Every store over one database connection (closing `store` closes all). */
export async function openStores(
  db: DbConfig,
): Promise<{ store: Store; capsulefiles: CapsulefileStore; egressProfiles: EgressProfileStore }> {
  const orm = await openOrm(db);
  return {
    store: new SqlStore(orm),
    capsulefiles: new SqlCapsulefileStore(orm),
    egressProfiles: new SqlEgressProfileStore(orm),
  };
}
