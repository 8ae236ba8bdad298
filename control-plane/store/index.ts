// Public entry of the storage adapter.
import type {
  BillingStore,
  EgressProfileStore,
  KeyStore,
  RunnerRegistry,
  Store,
  UsageStore,
  WebhookStore,
} from '../domain/index.js';
import type { CapsulefileStore } from '../capsulefile/index.js';
import { SqlCapsulefileStore } from './capsulefile-store.js';
import { SqlBillingStore } from './billing-store.js';
import { SqlEgressProfileStore } from './egress-store.js';
import { SqlKeyStore } from './key-store.js';
import { SqlUsageStore } from './usage-store.js';
import { openOrm, type DbConfig } from './orm.js';
import { MIGRATIONS } from './migrations.js';
import { SqlStore } from './sql-store.js';
import { SqlRunnerRegistry } from './runner-registry.js';
import { SqlWebhookStore } from './webhook-store.js';

export type { DbConfig } from './orm.js';
export const MIGRATION_COUNT = MIGRATIONS.length;

/** Opens the database, applies migrations, returns the Store. */
export async function openStore(db: DbConfig): Promise<Store> {
  return new SqlStore(await openOrm(db));
}

export interface Stores {
  store: Store;
  capsulefiles: CapsulefileStore;
  egressProfiles: EgressProfileStore;
  keys: KeyStore;
  usage: UsageStore;
  billing: BillingStore;
  webhooks: WebhookStore;
  runners: RunnerRegistry;
}

/** Every store over one database connection (closing `store` closes all). */
export async function openStores(db: DbConfig): Promise<Stores> {
  const orm = await openOrm(db);
  return {
    store: new SqlStore(orm),
    capsulefiles: new SqlCapsulefileStore(orm),
    egressProfiles: new SqlEgressProfileStore(orm),
    keys: new SqlKeyStore(orm),
    usage: new SqlUsageStore(orm),
    billing: new SqlBillingStore(orm),
    webhooks: new SqlWebhookStore(orm, db.driver === 'postgresql'),
    runners: new SqlRunnerRegistry(orm),
  };
}
