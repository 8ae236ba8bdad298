// The EgressProfileStore port over MikroORM. Unique violations (a profile
// name twice in one account, the same rule twice in one profile) become
// resource_conflict naming the field. Deleting a profile locks its row first
// (a no-op UPDATE) and counts live capsules inside the same transaction.
import { UniqueConstraintViolationException } from '@mikro-orm/core';
import type { SqlEntityManager } from '@mikro-orm/sql';
import { ApiError } from '../../shared/errors.js';
import type {
  EgressProfile,
  EgressProfilePage,
  EgressProfileStore,
  EgressRule,
  EgressRuleKind,
  EgressRulePage,
  ProfileDeleteOutcome,
} from '../domain/index.js';
import { EgressProfileEntity, EgressRuleEntity, type EgressProfileRow, type EgressRuleRow } from './entities.js';
import type { Orm } from './orm.js';
import { after, all, liveUsers, num, page, run } from './sql.js';

const toProfile = (r: EgressProfileRow): EgressProfile => ({
  id: r.id,
  customer_id: r.customer_id,
  name: r.name,
  description: r.description,
  created_at: r.created_at,
});
const toRule = (r: EgressRuleRow): EgressRule => ({
  id: r.id,
  profile_id: r.profile_id,
  customer_id: r.customer_id,
  kind: r.kind as EgressRuleKind,
  value: r.value,
  port: num(r.port),
  created_at: r.created_at,
});

function conflict(e: unknown, field: string, message: string): never {
  if (e instanceof UniqueConstraintViolationException)
    throw new ApiError('resource_conflict', `${field}: ${message}`, { cause: e, extra: { field } });
  throw e;
}

export class SqlEgressProfileStore implements EgressProfileStore {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  /** Locks the profile row for the rest of the transaction (a no-op UPDATE); 1 when it exists. */
  private lockProfile(em: SqlEntityManager, id: string): Promise<number> {
    return run(em, 'update "egress_profiles" set "name" = "name" where "id" = ?', [id]);
  }

  async insertProfile(p: EgressProfile): Promise<void> {
    try {
      await this.em().insert(EgressProfileEntity, { ...p });
    } catch (e) {
      conflict(e, 'name', 'an egress profile with this name already exists in this account');
    }
  }

  async getProfile(id: string): Promise<EgressProfile | null> {
    const r = await this.em().findOne(EgressProfileEntity, { id });
    return r ? toProfile(r) : null;
  }

  async profileByName(customerId: string, name: string): Promise<EgressProfile | null> {
    const r = await this.em().findOne(EgressProfileEntity, { customer_id: customerId, name });
    return r ? toProfile(r) : null;
  }

  async listProfiles(customerId: string, limit: number, cursor: string | null): Promise<EgressProfilePage> {
    // Newest first, like the other lists.
    const rows = await this.em().find(
      EgressProfileEntity,
      { customer_id: customerId, ...after(cursor, 'desc') } as never,
      { orderBy: { created_at: 'desc', id: 'desc' }, limit: limit + 1 },
    );
    return page(rows.map(toProfile), limit);
  }

  async updateProfile(id: string, set: { name?: string; description?: string }): Promise<EgressProfile | null> {
    if (set.name !== undefined || set.description !== undefined) {
      try {
        await this.em().nativeUpdate(
          EgressProfileEntity,
          { id },
          {
            ...(set.name !== undefined ? { name: set.name } : {}),
            ...(set.description !== undefined ? { description: set.description } : {}),
          },
        );
      } catch (e) {
        conflict(e, 'name', 'an egress profile with this name already exists in this account');
      }
    }
    return this.getProfile(id);
  }

  async deleteProfile(id: string): Promise<ProfileDeleteOutcome> {
    return this.em().transactional(async (em) => {
      if ((await this.lockProfile(em, id)) !== 1) return 'missing';
      if ((await liveUsers(em, 'egress_profile_id', id)) > 0) return 'in_use';
      await em.nativeDelete(EgressRuleEntity, { profile_id: id });
      await em.nativeDelete(EgressProfileEntity, { id });
      return 'deleted';
    });
  }

  async insertRule(r: EgressRule, maxPerProfile: number): Promise<'ok' | 'missing' | 'limit'> {
    try {
      return await this.em().transactional(async (em) => {
        // Locked like deleteProfile: a rule never lands on a profile being deleted, and concurrent adds count in turn.
        if ((await this.lockProfile(em, r.profile_id)) !== 1) return 'missing';
        const rows = await all<{ n: unknown }>(
          em,
          'select count(*) as "n" from "egress_rules" where "profile_id" = ?',
          [r.profile_id],
        );
        if (num(rows[0]?.n ?? 0) >= maxPerProfile) return 'limit';
        await em.insert(EgressRuleEntity, { ...r });
        return 'ok';
      });
    } catch (e) {
      conflict(e, 'value', 'this profile already has a rule with this kind, value and port');
    }
  }

  async getRule(id: string): Promise<EgressRule | null> {
    const r = await this.em().findOne(EgressRuleEntity, { id });
    return r ? toRule(r) : null;
  }

  async listRules(
    customerId: string,
    profileId: string | null,
    limit: number,
    cursor: string | null,
  ): Promise<EgressRulePage> {
    // Oldest first: the order rules were added.
    const where = {
      customer_id: customerId,
      ...(profileId !== null ? { profile_id: profileId } : {}),
      ...after(cursor, 'asc'),
    };
    const rows = await this.em().find(EgressRuleEntity, where as never, {
      orderBy: { created_at: 'asc', id: 'asc' },
      limit: limit + 1,
    });
    return page(rows.map(toRule), limit);
  }

  async allRules(profileId: string): Promise<EgressRule[]> {
    return (
      await this.em().find(EgressRuleEntity, { profile_id: profileId }, { orderBy: { created_at: 'asc', id: 'asc' } })
    ).map(toRule);
  }

  async deleteRule(id: string): Promise<boolean> {
    return (await this.em().nativeDelete(EgressRuleEntity, { id })) === 1;
  }
}
