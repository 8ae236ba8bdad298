// API keys beyond the one issued at sign-up: list, issue (live or test),
// revoke at once, rotate with a bounded grace, and the operator's recovery of
// a lost key. A key is shown once and stored only as its SHA-256.
import { ApiError, invalid } from '../../shared/errors.js';
import type { ApiKeyRecord, Caller, KeyMode, NewApiKey } from '../domain/index.js';
import { isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { hashApiKey, KEY_PREFIX_CHARS, newApiKey, newId } from './ids.js';

/** Keys an account may hold not revoked (keys in a rotation grace not counted). */
export const MAX_ACTIVE_KEYS = 20;
/** Longest rotation grace: the old key works at most this long after rotation. */
export const MAX_GRACE_SECONDS = 24 * 3600;

export const KEY_WARNING = 'Store this API key now: it is shown once and cannot be retrieved.';

/** A fresh key and the row that stores it (hash only). */
export function issueKey(
  d: Pick<Deps, 'random' | 'clock'>,
  customerId: string,
  mode: KeyMode,
): { key: string; entry: NewApiKey } {
  const key = newApiKey(mode, d.random);
  return {
    key,
    entry: {
      key_hash: hashApiKey(key),
      record: {
        id: newId('key_', d.random),
        customer_id: customerId,
        prefix: key.slice(0, KEY_PREFIX_CHARS),
        mode,
        created_at: d.clock.nowIso(),
        last_used_at: null,
        revoked_at: null,
      },
    },
  };
}

export function keyView(k: ApiKeyRecord): Record<string, unknown> {
  return {
    id: k.id,
    prefix: k.prefix,
    mode: k.mode,
    created_at: k.created_at,
    last_used_at: k.last_used_at,
    revoked_at: k.revoked_at,
  };
}

const keyNotFound = (): ApiError => new ApiError('resource_not_found', 'API key not found');

export class KeyService {
  constructor(private readonly d: Deps) {}

  async list(
    caller: Caller,
    limit: number,
    cursor: string | null,
  ): Promise<{ items: Record<string, unknown>[]; next_cursor: string | null }> {
    const p = await this.d.keys.listApiKeys(caller.account.customer_id, limit, cursor);
    return { items: p.items.map(keyView), next_cursor: p.next_cursor };
  }

  async create(caller: Caller, mode: KeyMode): Promise<Record<string, unknown>> {
    const { key, entry } = issueKey(this.d, caller.account.customer_id, mode);
    if ((await this.d.keys.insertApiKey(entry, MAX_ACTIVE_KEYS)) === 'limit')
      throw new ApiError('resource_conflict', `at most ${MAX_ACTIVE_KEYS} active API keys: revoke one first`);
    this.d.log.info({ customer_id: caller.account.customer_id, key_id: entry.record.id, mode }, 'api key issued');
    return { ...keyView(entry.record), key, warning: KEY_WARNING };
  }

  async revoke(caller: Caller, id: string): Promise<Record<string, unknown>> {
    const now = this.d.clock.nowIso();
    const outcome = id.length <= 64 ? await this.d.keys.revokeApiKey(caller.account.customer_id, id, now) : 'missing';
    if (outcome === 'missing') throw keyNotFound();
    if (outcome === 'already_revoked') throw new ApiError('resource_conflict', 'API key is already revoked');
    if (outcome === 'last_live_key')
      throw new ApiError(
        'resource_conflict',
        'the last live API key cannot be revoked: issue or rotate to a new one first',
      );
    this.d.log.info({ customer_id: caller.account.customer_id, key_id: id }, 'api key revoked');
    return { id, revoked_at: now };
  }

  async rotate(caller: Caller, id: string, graceSeconds: number): Promise<Record<string, unknown>> {
    if (!Number.isInteger(graceSeconds) || graceSeconds < 0 || graceSeconds > MAX_GRACE_SECONDS)
      throw invalid('grace_seconds', `must be an integer from 0 to ${MAX_GRACE_SECONDS}`);
    const customerId = caller.account.customer_id;
    // The successor has the old key's mode.
    const old = id.length <= 64 ? await this.d.keys.getApiKey(customerId, id) : null;
    if (!old) throw keyNotFound();
    const { key, entry } = issueKey(this.d, customerId, old.mode);
    const endsAt = isoMicros(this.d.clock.nowMs() + graceSeconds * 1000);
    const outcome = await this.d.keys.rotateApiKey(customerId, id, entry, endsAt);
    if (outcome === 'missing') throw keyNotFound();
    if (outcome === 'already_revoked') throw new ApiError('resource_conflict', 'API key is already revoked or rotated');
    this.d.log.info(
      { customer_id: customerId, key_id: id, successor: entry.record.id, grace_seconds: graceSeconds },
      'api key rotated',
    );
    return { ...keyView(entry.record), key, warning: KEY_WARNING, replaces: { id, revoked_at: endsAt } };
  }
}
