// The KeyStore port over MikroORM: API keys (issue, list, revoke, rotate,
// operator replacement) and the account's TOTP factor. Every rule that spans
// rows ("at least one live key remains", "at most N active keys") is checked
// after locking the account row (a no-op UPDATE), so two concurrent requests
// are ordered, never interleaved.
import type { SqlEntityManager } from '@mikro-orm/sql';
import type {
  ApiKeyPage,
  ApiKeyRecord,
  KeyMode,
  KeyStore,
  MfaFactor,
  NewApiKey,
  RevokeOutcome,
  RotateOutcome,
} from '../domain/index.js';
import type { Orm } from './orm.js';
import { all, num, page, run } from './sql.js';

interface KeyRow {
  id: string;
  customer_id: string;
  prefix: string;
  mode: string;
  created_at: string;
  last_used_at: string | null;
  revoked_at: string | null;
  revoked: unknown;
}

const KEY_COLUMNS = '"id", "customer_id", "prefix", "mode", "created_at", "last_used_at", "revoked_at", "revoked"';

const toKey = (r: KeyRow): ApiKeyRecord => ({
  id: r.id,
  customer_id: r.customer_id,
  prefix: r.prefix,
  mode: (r.mode === 'test' ? 'test' : 'live') as KeyMode,
  created_at: r.created_at,
  last_used_at: r.last_used_at,
  revoked_at: r.revoked_at,
});

/** Locks the account row until the transaction ends; 1 when it exists. */
const lockAccount = (em: SqlEntityManager, customerId: string): Promise<number> =>
  run(em, 'update "accounts" set "tier" = "tier" where "customer_id" = ?', [customerId]);

/** Keys with no revocation, not even a scheduled one. */
async function activeKeys(em: SqlEntityManager, customerId: string, mode?: KeyMode): Promise<number> {
  const rows = await all<{ n: unknown }>(
    em,
    `select count(*) as "n" from "api_keys" where "customer_id" = ? and "revoked" = 0 and "revoked_at" is null${mode ? ' and "mode" = ?' : ''}`,
    mode ? [customerId, mode] : [customerId],
  );
  return num(rows[0]?.n ?? 0);
}

async function insertKey(em: SqlEntityManager, k: NewApiKey): Promise<void> {
  const r = k.record;
  await run(
    em,
    `insert into "api_keys" ("key_hash", "customer_id", "mode", "created_at", "revoked", "id", "prefix", "last_used_at", "revoked_at", "mfa_verified_until")
     values (?, ?, ?, ?, 0, ?, ?, null, null, null)`,
    [k.key_hash, r.customer_id, r.mode, r.created_at, r.id, r.prefix],
  );
}

export class SqlKeyStore implements KeyStore {
  constructor(private readonly orm: Orm) {}

  private em(): SqlEntityManager {
    return this.orm.em.fork() as SqlEntityManager;
  }

  async listApiKeys(customerId: string, limit: number, cursor: string | null): Promise<ApiKeyPage> {
    const params: unknown[] = [customerId];
    let after = '';
    if (cursor !== null) {
      const [at, id] = cursor.split('|');
      after = ' and ("created_at" < ? or ("created_at" = ? and "id" < ?))';
      params.push(at, at, id);
    }
    const rows = await all<KeyRow>(
      this.em(),
      `select ${KEY_COLUMNS} from "api_keys" where "customer_id" = ?${after} order by "created_at" desc, "id" desc limit ?`,
      [...params, limit + 1],
    );
    return page(rows.map(toKey), limit);
  }

  async getApiKey(customerId: string, id: string): Promise<ApiKeyRecord | null> {
    const rows = await all<KeyRow>(
      this.em(),
      `select ${KEY_COLUMNS} from "api_keys" where "id" = ? and "customer_id" = ?`,
      [id, customerId],
    );
    return rows[0] ? toKey(rows[0]) : null;
  }

  async insertApiKey(k: NewApiKey, maxActive: number): Promise<'ok' | 'limit'> {
    return this.em().transactional(async (em) => {
      await lockAccount(em, k.record.customer_id);
      if ((await activeKeys(em, k.record.customer_id)) >= maxActive) return 'limit';
      await insertKey(em, k);
      return 'ok';
    });
  }

  async revokeApiKey(customerId: string, id: string, nowIso: string): Promise<RevokeOutcome> {
    return this.em().transactional(async (em) => {
      await lockAccount(em, customerId);
      const rows = await all<KeyRow>(em, `select ${KEY_COLUMNS} from "api_keys" where "id" = ? and "customer_id" = ?`, [
        id,
        customerId,
      ]);
      const k = rows[0];
      if (!k) return 'missing';
      if (num(k.revoked) === 1 || (k.revoked_at !== null && k.revoked_at <= nowIso)) return 'already_revoked';
      // A key in its rotation grace already has a successor; any other live key must leave one behind.
      if (k.mode === 'live' && k.revoked_at === null && (await activeKeys(em, customerId, 'live')) <= 1)
        return 'last_live_key';
      await run(em, 'update "api_keys" set "revoked" = 1, "revoked_at" = ? where "id" = ?', [nowIso, id]);
      return 'revoked';
    });
  }

  async rotateApiKey(customerId: string, id: string, successor: NewApiKey, endsAtIso: string): Promise<RotateOutcome> {
    return this.em().transactional(async (em) => {
      await lockAccount(em, customerId);
      const rows = await all<KeyRow>(em, `select ${KEY_COLUMNS} from "api_keys" where "id" = ? and "customer_id" = ?`, [
        id,
        customerId,
      ]);
      const k = rows[0];
      if (!k) return 'missing';
      // A key already revoked, or already rotated (its end scheduled), has no second successor.
      // The successor takes the old key's place among the active keys: no count to check.
      if (num(k.revoked) === 1 || k.revoked_at !== null) return 'already_revoked';
      await run(em, 'update "api_keys" set "revoked_at" = ? where "id" = ?', [endsAtIso, id]);
      await insertKey(em, successor);
      return 'rotated';
    });
  }

  async replaceApiKeysByEmail(
    email: string,
    make: (customerId: string) => NewApiKey,
    nowIso: string,
  ): Promise<string | null> {
    return this.em().transactional(async (em) => {
      const acc = await all<{ customer_id: string }>(em, 'select "customer_id" from "accounts" where "email" = ?', [
        email,
      ]);
      const customerId = acc[0]?.customer_id;
      if (!customerId) return null;
      await lockAccount(em, customerId);
      await run(
        em,
        `update "api_keys" set "revoked" = 1, "revoked_at" = ? where "customer_id" = ? and "revoked" = 0 and ("revoked_at" is null or "revoked_at" > ?)`,
        [nowIso, customerId, nowIso],
      );
      await insertKey(em, make(customerId));
      return customerId;
    });
  }

  async markMfaVerified(keyId: string, untilIso: string): Promise<void> {
    await run(this.em(), 'update "api_keys" set "mfa_verified_until" = ? where "id" = ?', [untilIso, keyId]);
  }

  // ---- MFA

  async getMfa(customerId: string): Promise<MfaFactor | null> {
    const em = this.em();
    const rows = await all<{
      customer_id: string;
      secret_sealed: string;
      state: string;
      created_at: string;
      activated_at: string | null;
      last_step: unknown;
    }>(
      em,
      'select "customer_id", "secret_sealed", "state", "created_at", "activated_at", "last_step" from "mfa_factors" where "customer_id" = ?',
      [customerId],
    );
    const r = rows[0];
    if (!r) return null;
    const codes = await all<{ n: unknown }>(
      em,
      'select count(*) as "n" from "mfa_recovery_codes" where "customer_id" = ? and "used_at" is null',
      [customerId],
    );
    return {
      customer_id: r.customer_id,
      secret_sealed: r.secret_sealed,
      state: r.state === 'active' ? 'active' : 'pending',
      created_at: r.created_at,
      activated_at: r.activated_at,
      last_step: r.last_step === null ? null : num(r.last_step),
      recovery_codes_remaining: num(codes[0]?.n ?? 0),
    };
  }

  async putPendingMfa(f: MfaFactor, recoveryCodeHashes: string[]): Promise<'ok' | 'active'> {
    return this.em().transactional(async (em) => {
      await lockAccount(em, f.customer_id);
      const cur = await all<{ state: string }>(em, 'select "state" from "mfa_factors" where "customer_id" = ?', [
        f.customer_id,
      ]);
      if (cur[0]?.state === 'active') return 'active';
      await run(em, 'delete from "mfa_recovery_codes" where "customer_id" = ?', [f.customer_id]);
      await run(em, 'delete from "mfa_factors" where "customer_id" = ?', [f.customer_id]);
      await run(
        em,
        `insert into "mfa_factors" ("customer_id", "secret_sealed", "state", "created_at", "activated_at", "last_step", "attempts", "attempts_window_start")
         values (?, ?, 'pending', ?, null, null, 0, null)`,
        [f.customer_id, f.secret_sealed, f.created_at],
      );
      for (const h of recoveryCodeHashes)
        await run(em, 'insert into "mfa_recovery_codes" ("customer_id", "code_hash", "used_at") values (?, ?, null)', [
          f.customer_id,
          h,
        ]);
      return 'ok';
    });
  }

  async takeMfaAttempt(
    customerId: string,
    nowIso: string,
    windowStartIso: string,
    max: number,
  ): Promise<string | null> {
    // One statement: a window that began at or before windowStartIso is over; it restarts at now with this attempt.
    const n = await run(
      this.em(),
      `update "mfa_factors" set
         "attempts" = case when "attempts_window_start" is null or "attempts_window_start" <= ? then 1 else "attempts" + 1 end,
         "attempts_window_start" = case when "attempts_window_start" is null or "attempts_window_start" <= ? then ? else "attempts_window_start" end
       where "customer_id" = ? and ("attempts_window_start" is null or "attempts_window_start" <= ? or "attempts" < ?)`,
      [windowStartIso, windowStartIso, nowIso, customerId, windowStartIso, max],
    );
    if (n === 1) return null;
    const rows = await all<{ w: string | null }>(
      this.em(),
      'select "attempts_window_start" as "w" from "mfa_factors" where "customer_id" = ?',
      [customerId],
    );
    return rows[0]?.w ?? nowIso;
  }

  async resetMfaAttempts(customerId: string): Promise<void> {
    await run(
      this.em(),
      'update "mfa_factors" set "attempts" = 0, "attempts_window_start" = null where "customer_id" = ?',
      [customerId],
    );
  }

  async acceptTotpStep(customerId: string, step: number): Promise<boolean> {
    const n = await run(
      this.em(),
      'update "mfa_factors" set "last_step" = ? where "customer_id" = ? and ("last_step" is null or "last_step" < ?)',
      [step, customerId, step],
    );
    return n === 1;
  }

  async useRecoveryCode(customerId: string, codeHash: string, nowIso: string): Promise<boolean> {
    const n = await run(
      this.em(),
      'update "mfa_recovery_codes" set "used_at" = ? where "customer_id" = ? and "code_hash" = ? and "used_at" is null',
      [nowIso, customerId, codeHash],
    );
    return n === 1;
  }

  async activateMfa(customerId: string, nowIso: string): Promise<boolean> {
    const n = await run(
      this.em(),
      `update "mfa_factors" set "state" = 'active', "activated_at" = ? where "customer_id" = ? and "state" = 'pending'`,
      [nowIso, customerId],
    );
    return n === 1;
  }

  async deleteMfa(customerId: string): Promise<boolean> {
    return this.em().transactional(async (em) => {
      await run(em, 'delete from "mfa_recovery_codes" where "customer_id" = ?', [customerId]);
      const n = await run(em, 'delete from "mfa_factors" where "customer_id" = ?', [customerId]);
      // Verification belonged to the removed factor.
      await run(em, 'update "api_keys" set "mfa_verified_until" = null where "customer_id" = ?', [customerId]);
      return n === 1;
    });
  }
}
