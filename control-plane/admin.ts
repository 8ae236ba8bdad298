// Operator actions on the configured database (used by `capsule admin`).
import type { Config } from './config.js';
import { normalizeTier, type Tier } from './domain/index.js';
import { openStore } from './store/index.js';

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
