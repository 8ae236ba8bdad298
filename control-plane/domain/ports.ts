// Service-facing ports: what the services need of storage, time and randomness.
// Adapters (store/, http/) implement or consume these; domain has no I/O.
import type {
  Account, Capsule, CapsuleStatus, IdempotentResponse, KeyRecord, Limits, StoredProof, Tier,
} from './types.js';
import type { ActivityEvent } from '../../shared/proof/index.js';

export interface Clock {
  /** Milliseconds since the epoch. */
  nowMs(): number;
  /** RFC 3339 UTC with exactly six fraction digits (CONTRACT 1). */
  nowIso(): string;
}

export type Random = (n: number) => Uint8Array;

export interface NewAccount {
  customer_id: string;
  email: string;
  tier: Tier;
  jurisdiction: Account['jurisdiction'];
  key_hash: string;
  key_mode: 'live' | 'test';
  created_at: string;
  billing_cycle_start: string;
}

export type ReserveOutcome = 'ok' | 'capsules_per_month' | 'concurrent_capsules' | 'cdp_limit';

export type IdempotencyClaim =
  | { state: 'claimed' }
  | { state: 'done'; response: IdempotentResponse; request_hash: string }
  | { state: 'pending' };

export interface Destruction {
  capsule: Capsule;
  from: readonly CapsuleStatus[];
  status: CapsuleStatus;
  destroyed_at: string | null;
  proof: StoredProof;
  key: KeyRecord | null;
}

export interface ContactMessage {
  id: string; email: string; name: string | null; company: string | null; message: string; source: string | null; created_at: string;
}

export interface ActivitySide {
  executions?: number;
  bytes?: number;
  /** Status compare-and-set applied with the event (no-op when the status is not in `from`). */
  move?: { from: readonly CapsuleStatus[]; to: CapsuleStatus };
}

export interface CapsulePage { items: Capsule[]; next_cursor: string | null }

export interface Store {
  ping(): Promise<void>;
  close(): Promise<void>;

  // Accounts and keys
  createAccount(a: NewAccount): Promise<Account>;
  findCallerByKeyHash(hash: string): Promise<{ account: Account; key_mode: 'live' | 'test' } | null>;
  getAccount(customerId: string): Promise<Account | null>;
  setTierByEmail(email: string, tier: Tier): Promise<boolean>;
  /** Rolls the billing cycle if it has passed, then reloads. */
  refreshCycle(customerId: string, cycleStart: string): Promise<Account | null>;

  /**
   * Atomically: roll the cycle when due, then count one capsule against the
   * month and one live capsule, only if every limit allows it.
   */
  reserveCapsule(customerId: string, limits: Limits, cycleStart: string): Promise<ReserveOutcome>;
  /** Gives back a live-capsule slot (destroy, expiry, failed create). */
  releaseLive(customerId: string): Promise<void>;
  /** Undoes a reservation whose capsule never came to exist. */
  unreserveCapsule(customerId: string): Promise<void>;

  // Capsules
  /** Inserts the capsule and its first activity event in one transaction. */
  insertCapsule(c: Capsule, first: { type: string; at: string; fields: Record<string, unknown> }): Promise<void>;
  getCapsule(id: string): Promise<Capsule | null>;
  listCapsules(customerId: string, limit: number, cursor: string | null): Promise<CapsulePage>;
  /** Compare-and-set on status; true when the row moved. */
  transition(id: string, from: readonly CapsuleStatus[], to: CapsuleStatus, destroyedAt?: string): Promise<boolean>;
  addUsage(id: string, executions: number, bytes: number): Promise<void>;
  liveCapsules(): Promise<Capsule[]>;
  expiredLiveCapsules(nowIso: string): Promise<Capsule[]>;

  // Activity trail
  /**
   * Appends the next event (seq from 1) and, in the same transaction, the
   * side effects that belong to it: usage counters and a status move.
   */
  appendActivity(capsuleId: string, type: string, at: string, fields: Record<string, unknown>, side?: ActivitySide): Promise<ActivityEvent>;
  activity(capsuleId: string): Promise<ActivityEvent[]>;

  // Proofs and keys
  /** Stores the proof and counts it against the cycle in one transaction. */
  insertProof(p: StoredProof, billable: boolean): Promise<void>;
  getProofByCapsule(capsuleId: string): Promise<StoredProof | null>;
  insertKey(k: KeyRecord): Promise<void>;
  getKey(keyId: string): Promise<KeyRecord | null>;

  /**
   * One transaction: register the signing key, store the proof (counted
   * against the cycle when billable), move the capsule to its final status
   * and give back its live slot. The proof is durable before any answer.
   */
  recordDestruction(d: Destruction): Promise<void>;

  insertContact(c: ContactMessage): Promise<void>;

  // Idempotency
  claimIdempotency(customerId: string, key: string, requestHash: string, nowIso: string, notBeforeIso: string): Promise<IdempotencyClaim>;
  completeIdempotency(customerId: string, key: string, response: IdempotentResponse): Promise<void>;
  releaseIdempotency(customerId: string, key: string): Promise<void>;
}
