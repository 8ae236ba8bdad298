// The tier table. Free is fixed by the SPEC; paid tiers come from configuration
// (one table, config.ts) because the SPEC leaves their numbers to each plan.
import { invalid } from '../../shared/errors.js';
import type { Limits, Tier } from './types.js';
import { TIERS } from './types.js';

/** SPEC "Limits": Free tier, exactly. */
export const FREE_LIMITS: Limits = Object.freeze({
  capsules_per_month: 100,
  max_ttl_seconds: 300,
  concurrent_capsules: 3,
  rate_limit_rpm: 20,
  cdp_limit: 100,
});

export type PaidTierTable = Record<Exclude<Tier, 'free'>, Omit<Limits, 'cdp_limit'>>;

/** External (marketing) names accepted wherever a tier is named. */
const EXTERNAL: Record<string, Tier> = { developer: 'starter', team: 'business' };

/** Wire name for a tier given by wire or external name (case-insensitive); null if unknown. */
export function normalizeTier(name: string): Tier | null {
  const n = name.trim().toLowerCase();
  if ((TIERS as readonly string[]).includes(n)) return n as Tier;
  return EXTERNAL[n] ?? null;
}

export function parseTier(field: string, name: unknown): Tier {
  const t = typeof name === 'string' ? normalizeTier(name) : null;
  if (!t) throw invalid(field, `must be one of ${TIERS.join(', ')} (or developer, team)`);
  return t;
}

export class TierTable {
  constructor(private readonly paid: PaidTierTable) {}
  limits(tier: Tier): Limits {
    if (tier === 'free') return FREE_LIMITS;
    // SPEC: cdp_limit is null (unlimited) for every tier but Free.
    return { ...this.paid[tier], cdp_limit: null };
  }
}
