// Sign-up, the account view, tier changes, contact messages.
import { ApiError } from '../../shared/errors.js';
import type { Account, Caller, Jurisdiction, Limits, Tier } from '../domain/index.js';
import { issueKey } from './api-keys.js';
import { cycleStart, isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { hashApiKey, newId, API_KEY_RE } from './ids.js';

/** `last_used_at` of a key is written at most once per this interval. */
export const LAST_USED_PRECISION_MS = 60_000;

export const SIGNUP_WARNING =
  'Store this API key now: it is shown once and cannot be retrieved. A lost key needs a rotation through support.';

/**
 * The `limits` object of the SPEC, integers only, plus the tier's upload bound
 * (cdp_limit lives under usage). `max_lifetime_seconds` is the self-hosted
 * name of `max_ttl_seconds` (SPEC "Self-hosted additions"): both are sent,
 * with the same value.
 */
export function publicLimits(l: Limits): Record<string, number> {
  return {
    capsules_per_month: l.capsules_per_month,
    max_ttl_seconds: l.max_ttl_seconds,
    max_lifetime_seconds: l.max_ttl_seconds,
    concurrent_capsules: l.concurrent_capsules,
    rate_limit_rpm: l.rate_limit_rpm,
    upload_max_bytes: l.upload_max_bytes,
  };
}

export class AccountService {
  constructor(private readonly d: Deps) {}

  async signup(email: string, jurisdiction: Jurisdiction): Promise<Record<string, unknown>> {
    const customerId = newId('cus_', this.d.random);
    const { key: apiKey, entry } = issueKey(this.d, customerId, 'live');
    const now = this.d.clock.nowIso();
    const account = await this.d.store.createAccount({
      customer_id: customerId,
      email: email.toLowerCase(),
      tier: 'free',
      jurisdiction,
      key_hash: entry.key_hash,
      key_id: entry.record.id,
      key_prefix: entry.record.prefix,
      key_mode: 'live',
      created_at: now,
      billing_cycle_start: cycleStart(this.d.clock.nowMs()),
    });
    this.d.log.info({ customer_id: account.customer_id }, 'account created');
    return {
      api_key: apiKey,
      customer_id: account.customer_id,
      email: account.email,
      tier: account.tier,
      jurisdiction: account.jurisdiction,
      limits: publicLimits(this.d.tiers.limits(account.tier)),
      warning: SIGNUP_WARNING,
    };
  }

  /** Resolves a bearer key; null when missing, malformed, unknown, revoked or past its rotation grace. */
  async authenticate(key: string | undefined): Promise<Caller | null> {
    if (!key || !API_KEY_RE.test(key)) return null;
    const now = this.d.clock.nowMs();
    return this.d.store.findCallerByKeyHash(hashApiKey(key), isoMicros(now), isoMicros(now - LAST_USED_PRECISION_MS));
  }

  limits(account: Account): Limits {
    return this.d.tiers.limits(account.tier);
  }

  async me(caller: Caller): Promise<Record<string, unknown>> {
    const a = await this.d.store.refreshCycle(caller.account.customer_id, cycleStart(this.d.clock.nowMs()));
    if (!a) throw new ApiError('invalid_api_key', 'API key is not valid');
    const l = this.d.tiers.limits(a.tier);
    return {
      customer_id: a.customer_id,
      email: a.email,
      tier: a.tier,
      jurisdiction: a.jurisdiction,
      limits: publicLimits(l),
      usage: {
        capsules_used_this_month: a.capsules_used_this_month,
        cdps_this_cycle: a.cdps_this_cycle,
        cdp_limit: l.cdp_limit,
        billing_cycle_start: a.billing_cycle_start,
      },
      created_at: a.created_at,
    };
  }

  async setTier(email: string, tier: Tier): Promise<boolean> {
    return this.d.store.setTierByEmail(email.toLowerCase(), tier);
  }

  async contact(m: {
    email: string;
    name?: string | undefined;
    company?: string | undefined;
    message: string;
    source?: string | undefined;
  }): Promise<void> {
    await this.d.store.insertContact({
      id: newId('msg_', this.d.random),
      email: m.email,
      name: m.name ?? null,
      company: m.company ?? null,
      message: m.message,
      source: m.source ?? null,
      created_at: this.d.clock.nowIso(),
    });
  }
}
