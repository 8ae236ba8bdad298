// The tier table. Free is fixed by the SPEC; paid tiers come from configuration
// (one table, config.ts) because the SPEC leaves their numbers to each plan.
import { invalid } from '../../shared/errors.js';
import type { Limits, Tier } from './types.js';
import { TIERS } from './types.js';

/**
 * SPEC "Limits": Free tier, exactly. The SPEC leaves per-tier upload bounds
 * open; Free's is the smallest of the table (policies/tiers.yaml has the rest).
 */
export const FREE_LIMITS: Limits = Object.freeze({
  capsules_per_month: 100,
  max_ttl_seconds: 300,
  concurrent_capsules: 3,
  rate_limit_rpm: 20,
  upload_max_bytes: 16 * 1024 * 1024,
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
  private readonly rows: Record<Tier, Limits>;
  /** `uploadCeiling`: an install-wide cap over every tier's upload bound (null: none). */
  constructor(paid: PaidTierTable, uploadCeiling: number | null = null) {
    const cap = (l: Limits): Limits =>
      Object.freeze({ ...l, upload_max_bytes: Math.min(l.upload_max_bytes, uploadCeiling ?? Infinity) });
    // SPEC: cdp_limit is null (unlimited) for every tier but Free.
    this.rows = {
      free: cap(FREE_LIMITS),
      starter: cap({ ...paid.starter, cdp_limit: null }),
      business: cap({ ...paid.business, cdp_limit: null }),
      enterprise: cap({ ...paid.enterprise, cdp_limit: null }),
    };
  }
  limits(tier: Tier): Limits {
    return this.rows[tier];
  }
}
