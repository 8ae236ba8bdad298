// Operator actions on the configured database (used by `capsule admin`).
import type { Config } from './config.js';
import { normalizeTier, type RunnerNode, type Tier } from './domain/index.js';
import { issueKey, systemClock, systemRandom } from './service/index.js';
import { MIGRATION_COUNT, openStore, openStores } from './store/index.js';

export class AdminError extends Error {}

/** Sets an account's tier by email; accepts wire and external tier names. */
export async function setTier(config: Config, email: string, tierName: string): Promise<Tier> {
  const tier = normalizeTier(tierName);
  if (!tier)
    throw new AdminError(`unknown tier "${tierName}": use free, starter (developer), business (team) or enterprise`);
  const store = await openStore(config.database);
  try {
    if (!(await store.setTierByEmail(email.trim().toLowerCase(), tier)))
      throw new AdminError(`no account with email ${email}`);
    return tier;
  } finally {
    await store.close();
  }
}

/**
 * Operator recovery of a lost key (SPEC: "rotation through support"): issues a
 * new live key and revokes every other key of the account; returns the key,
 * shown once.
 */
export async function rotateKey(config: Config, email: string): Promise<string> {
  const { store, keys } = await openStores(config.database);
  try {
    let key = '';
    const customerId = await keys.replaceApiKeysByEmail(
      email.trim().toLowerCase(),
      (cid) => {
        const issued = issueKey({ clock: systemClock, random: systemRandom }, cid, 'live');
        key = issued.key;
        return issued.entry;
      },
      systemClock.nowIso(),
    );
    if (customerId === null) throw new AdminError(`no account with email ${email}`);
    return key;
  } finally {
    await store.close();
  }
}

/** `capsule admin drain NODE` / `undrain NODE`: stops (or resumes) new placements on a runner. */
export async function setRunnerDraining(config: Config, nodeId: string, draining: boolean): Promise<void> {
  const { store, runners } = await openStores(config.database);
  try {
    if (!(await runners.setDraining(nodeId, draining)))
      throw new AdminError(`no runner ${JSON.stringify(nodeId)} in the registry (see capsule admin runners)`);
  } finally {
    await store.close();
  }
}

/** `capsule admin runners`: the registry as the control planes last saw it. */
export async function listRunners(config: Config): Promise<RunnerNode[]> {
  const { store, runners } = await openStores(config.database);
  try {
    return await runners.runnerNodes();
  } finally {
    await store.close();
  }
}

/** `capsule admin migrate`: applies the database migrations (opening the store does) and checks none is left. */
export async function migrate(config: Config): Promise<number> {
  const store = await openStore(config.database);
  try {
    const pending = await store.pendingMigrations();
    if (pending.length > 0) throw new AdminError(`migrations not applied: ${pending.join(', ')}`);
    return MIGRATION_COUNT;
  } finally {
    await store.close();
  }
}
