// Egress profiles and rules (SPEC "Egress profiles", Team tier and above).
// Rule values are validated by the egress proxy's own checker, so whatever is
// stored is exactly what the proxy can enforce. The flat /v1/egress endpoints
// work on the account's profile named "default", created on first use.
import { ApiError, invalid } from '../../shared/errors.js';
import { checkRule } from '../../egress-proxy/index.js';
import {
  DEFAULT_EGRESS_PROFILE_NAME,
  type Caller,
  type EgressProfile,
  type EgressProfilePage,
  type EgressRule,
  type EgressRulePage,
  type Tier,
} from '../domain/index.js';
import type { Deps } from './deps.js';
import { newId } from './ids.js';

/** Tiers that may use egress profiles (SPEC: Team = `business`, or higher). */
const EGRESS_TIERS: readonly Tier[] = ['business', 'enterprise'];
export const PROFILE_NAME_MAX = 128;
export const PROFILE_DESCRIPTION_MAX = 1000;
/** Bound on one profile's rules: the proxy compiles them per capsule. */
export const RULES_PER_PROFILE_MAX = 500;

export const profileNotFound = (field?: string): ApiError =>
  new ApiError('resource_not_found', `${field ? `${field}: ` : ''}egress profile not found`);
const ruleNotFound = (): ApiError => new ApiError('resource_not_found', 'egress rule not found');

export function requireEgressTier(caller: Caller, field?: string): void {
  if (!EGRESS_TIERS.includes(caller.account.tier)) {
    throw new ApiError(
      'tier_required',
      `${field ? `${field}: ` : ''}egress profiles need the Team (business) tier or higher`,
    );
  }
}

function onlyKeys(body: Record<string, unknown>, keys: readonly string[]): void {
  for (const k of Object.keys(body)) if (!keys.includes(k)) throw invalid(k, 'unknown field');
}

function text(body: Record<string, unknown>, field: string, max: number, required: boolean): string | undefined {
  const v = body[field];
  if (v === undefined) {
    if (required) throw invalid(field, 'is required');
    return undefined;
  }
  if (typeof v !== 'string') throw invalid(field, 'must be a string');
  const s = v.trim();
  if (field === 'name' && s.length === 0) throw invalid(field, 'must not be empty');
  if ([...s].length > max) throw invalid(field, `at most ${max} characters`);
  // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
  if (/[\u0000-\u001f\u007f]/.test(s)) throw invalid(field, 'must not contain control characters');
  return s;
}

export class EgressProfileService {
  constructor(private readonly d: Deps) {}

  /** A profile the caller owns; anything else is 404 (ownership, as for capsules). */
  async owned(caller: Caller, id: string, field?: string): Promise<EgressProfile> {
    const p = id.length <= 64 ? await this.d.egressProfiles.getProfile(id) : null;
    if (!p || p.customer_id !== caller.account.customer_id) throw profileNotFound(field);
    return p;
  }

  async create(caller: Caller, body: Record<string, unknown>): Promise<EgressProfile> {
    requireEgressTier(caller);
    onlyKeys(body, ['name', 'description']);
    const p: EgressProfile = {
      id: newId('egp_', this.d.random),
      customer_id: caller.account.customer_id,
      name: text(body, 'name', PROFILE_NAME_MAX, true) as string,
      description: text(body, 'description', PROFILE_DESCRIPTION_MAX, false) ?? '',
      created_at: this.d.clock.nowIso(),
    };
    await this.d.egressProfiles.insertProfile(p);
    this.d.log.info({ egress_profile_id: p.id, customer_id: p.customer_id }, 'egress profile created');
    return p;
  }

  async list(caller: Caller, limit: number, cursor: string | null): Promise<EgressProfilePage> {
    requireEgressTier(caller);
    return this.d.egressProfiles.listProfiles(caller.account.customer_id, limit, cursor);
  }

  async detail(caller: Caller, id: string): Promise<{ profile: EgressProfile; rules: EgressRule[] }> {
    requireEgressTier(caller);
    const profile = await this.owned(caller, id);
    return { profile, rules: await this.d.egressProfiles.allRules(profile.id) };
  }

  async update(
    caller: Caller,
    id: string,
    body: Record<string, unknown>,
  ): Promise<{ profile: EgressProfile; rules: EgressRule[] }> {
    requireEgressTier(caller);
    onlyKeys(body, ['name', 'description']);
    const name = text(body, 'name', PROFILE_NAME_MAX, false);
    const description = text(body, 'description', PROFILE_DESCRIPTION_MAX, false);
    if (name === undefined && description === undefined) throw invalid('body', 'give name, description or both');
    const p = await this.owned(caller, id);
    const updated = await this.d.egressProfiles.updateProfile(p.id, {
      ...(name !== undefined ? { name } : {}),
      ...(description !== undefined ? { description } : {}),
    });
    if (!updated) throw profileNotFound();
    return { profile: updated, rules: await this.d.egressProfiles.allRules(p.id) };
  }

  async delete(caller: Caller, id: string): Promise<void> {
    requireEgressTier(caller);
    const p = await this.owned(caller, id);
    const r = await this.d.egressProfiles.deleteProfile(p.id);
    if (r === 'missing') throw profileNotFound();
    if (r === 'in_use') throw new ApiError('resource_conflict', 'egress profile is in use by active capsules');
  }

  async addRule(caller: Caller, profileId: string, body: Record<string, unknown>): Promise<EgressRule> {
    requireEgressTier(caller);
    const p = await this.owned(caller, profileId);
    return this.insertRule(caller, p, body);
  }

  async rules(caller: Caller, profileId: string, limit: number, cursor: string | null): Promise<EgressRulePage> {
    requireEgressTier(caller);
    const p = await this.owned(caller, profileId);
    return this.d.egressProfiles.listRules(caller.account.customer_id, p.id, limit, cursor);
  }

  async deleteRule(caller: Caller, profileId: string, ruleId: string): Promise<void> {
    requireEgressTier(caller);
    const p = await this.owned(caller, profileId);
    const r = ruleId.length <= 64 ? await this.d.egressProfiles.getRule(ruleId) : null;
    if (!r || r.profile_id !== p.id) throw ruleNotFound();
    if (!(await this.d.egressProfiles.deleteRule(r.id))) throw ruleNotFound();
  }

  // ---- flat endpoints

  async allRules(caller: Caller, limit: number, cursor: string | null): Promise<EgressRulePage> {
    requireEgressTier(caller);
    return this.d.egressProfiles.listRules(caller.account.customer_id, null, limit, cursor);
  }

  async addDefaultRule(caller: Caller, body: Record<string, unknown>): Promise<EgressRule> {
    requireEgressTier(caller);
    // Validate before creating the default profile: bad input leaves nothing written.
    this.checked(body);
    return this.insertRule(caller, await this.defaultProfile(caller), body);
  }

  async deleteAnyRule(caller: Caller, ruleId: string): Promise<void> {
    requireEgressTier(caller);
    const r = ruleId.length <= 64 ? await this.d.egressProfiles.getRule(ruleId) : null;
    if (!r || r.customer_id !== caller.account.customer_id) throw ruleNotFound();
    if (!(await this.d.egressProfiles.deleteRule(r.id))) throw ruleNotFound();
  }

  /** The account's default profile, created on first use (a concurrent creation wins; we read it back). */
  private async defaultProfile(caller: Caller): Promise<EgressProfile> {
    const cid = caller.account.customer_id;
    const existing = await this.d.egressProfiles.profileByName(cid, DEFAULT_EGRESS_PROFILE_NAME);
    if (existing) return existing;
    const p: EgressProfile = {
      id: newId('egp_', this.d.random),
      customer_id: cid,
      name: DEFAULT_EGRESS_PROFILE_NAME,
      description: 'default profile of the /v1/egress endpoints',
      created_at: this.d.clock.nowIso(),
    };
    try {
      await this.d.egressProfiles.insertProfile(p);
      return p;
    } catch (e) {
      const again = await this.d.egressProfiles.profileByName(cid, DEFAULT_EGRESS_PROFILE_NAME);
      if (again) return again;
      throw e;
    }
  }

  private checked(body: Record<string, unknown>): { kind: EgressRule['kind']; value: string; port: number } {
    onlyKeys(body, ['kind', 'value', 'port']);
    for (const k of ['kind', 'value', 'port']) if (body[k] === undefined) throw invalid(k, 'is required');
    const c = checkRule(body);
    if (!c.ok) throw new ApiError('invalid_parameters', c.problem.message, { extra: { field: c.problem.field } });
    return c.value;
  }

  private async insertRule(caller: Caller, p: EgressProfile, body: Record<string, unknown>): Promise<EgressRule> {
    const v = this.checked(body);
    const rule: EgressRule = {
      id: newId('egr_', this.d.random),
      profile_id: p.id,
      customer_id: caller.account.customer_id,
      kind: v.kind,
      value: v.value,
      port: v.port,
      created_at: this.d.clock.nowIso(),
    };
    const r = await this.d.egressProfiles.insertRule(rule, RULES_PER_PROFILE_MAX);
    // 'missing': a DELETE of the profile committed first.
    if (r === 'missing') throw profileNotFound();
    if (r === 'limit') throw invalid('profile', `an egress profile holds at most ${RULES_PER_PROFILE_MAX} rules`);
    return rule;
  }
}
