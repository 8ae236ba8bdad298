// Service-facing ports: what the services need of storage, time and randomness.
// Adapters (store/, http/) implement or consume these; domain has no I/O.
import type {
  Account,
  ApiKeyRecord,
  Caller,
  Capsule,
  CapsuleStatus,
  EgressProfile,
  EgressRule,
  EgressRuleKind,
  IdempotentResponse,
  KeyRecord,
  Limits,
  PendingProof,
  StoredProof,
  Tier,
  UsageEntry,
  UsageCounts,
  UsageItem,
} from './types.js';
import type { ActivityEvent, CustomerAttestation } from '../../shared/proof/index.js';
import type { OutboxEvent } from './webhooks.js';

/** What the services report to the operator's metrics (no I/O; the HTTP edge exports it). */
export interface ServiceMetrics {
  /** One proof signature: how long it took, and whether the managed key was unavailable (buffered). */
  proofSigned(seconds: number, outcome: 'signed' | 'buffered'): void;
}

export interface Clock {
  /** Milliseconds since the epoch. */
  nowMs(): number;
  /** RFC 3339 UTC with exactly six fraction digits (docs/PROOF_FORMAT.md "Encodings"). */
  nowIso(): string;
}

export type Random = (n: number) => Uint8Array;

export interface NewAccount {
  customer_id: string;
  email: string;
  tier: Tier;
  jurisdiction: Account['jurisdiction'];
  key_hash: string;
  key_id: string;
  key_prefix: string;
  key_mode: 'live' | 'test';
  created_at: string;
  billing_cycle_start: string;
}

export type InsertCapsuleOutcome = 'ok' | 'capsulefile_gone' | 'egress_profile_gone';

export type ReserveOutcome = 'ok' | 'capsules_per_month' | 'concurrent_capsules' | 'cdp_limit';

export type IdempotencyClaim =
  | {
      state: 'claimed';
      /** Set when this claim took over one whose process died: the capsule that request created, if any. */
      resource_id?: string | null;
      request_hash?: string;
    }
  | { state: 'done'; response: IdempotentResponse; request_hash: string }
  | { state: 'pending' };

export interface Destruction {
  capsule: Capsule;
  from: readonly CapsuleStatus[];
  status: CapsuleStatus;
  destroyed_at: string | null;
  /** The signed proof; null when the signing key is unavailable and `pending` holds the unsigned input. */
  proof: StoredProof | null;
  pending?: PendingProof;
  key: KeyRecord | null;
  /** The proof's usage item, written with the proof (billable as the capsule); null with `pending`. */
  usage: UsageEntry | null;
  /** Webhook events of the destruction, written to the outbox in the same transaction. */
  events?: OutboxEvent[];
}

export interface ContactMessage {
  id: string;
  email: string;
  name: string | null;
  company: string | null;
  message: string;
  source: string | null;
  created_at: string;
}

export interface ActivitySide {
  executions?: number;
  bytes?: number;
  /** Status compare-and-set applied with the event (no-op when the status is not in `from`). */
  move?: { from: readonly CapsuleStatus[]; to: CapsuleStatus };
  /** Usage item of a billable event (exec completed, egress request), written with the event. */
  usage?: UsageEntry;
  /**
   * The capsule's trail cap: when `activity_seq` has reached it the event is
   * not stored but counted as dropped (the other side effects still apply).
   * Absent: the event is always stored (execution completions, destruction).
   */
  cap?: number;
}

/** What a capsule's cap refused so far. */
export interface ActivityDrops {
  dropped_events: number;
  first_dropped_type: string | null;
}

export interface CapsulePage {
  items: Capsule[];
  next_cursor: string | null;
}

export interface Store {
  ping(): Promise<void>;
  /** Migrations this code knows that the database has not applied (another replica's rollback, a failed start). */
  pendingMigrations(): Promise<string[]>;
  /** Work waiting in the database: proofs awaiting the signing key, webhook deliveries not yet made. */
  queueDepths(): Promise<{ unsigned_proofs: number; webhook_deliveries_pending: number }>;
  close(): Promise<void>;

  // Accounts and keys
  createAccount(a: NewAccount): Promise<Account>;
  /**
   * The caller behind a key hash, read from the database on every request (no
   * cache: a revoked key fails on its next request in every process). A key
   * whose `revoked_at` is not after `nowIso` is refused. `last_used_at` is
   * written only when older than `touchBeforeIso` (one write a minute, not one a request).
   */
  findCallerByKeyHash(hash: string, nowIso: string, touchBeforeIso: string): Promise<Caller | null>;
  getAccount(customerId: string): Promise<Account | null>;
  setTierByEmail(email: string, tier: Tier): Promise<boolean>;
  /** Rolls the billing cycle if it has passed, then reloads. */
  refreshCycle(customerId: string, cycleStart: string): Promise<Account | null>;

  /**
   * Atomically: roll the cycle when due, then count one capsule against the
   * month and one live capsule, only if every limit allows it. A test-key
   * capsule (`billable` false) takes a live slot only: it never counts
   * against the month, the proofs or their limits.
   */
  reserveCapsule(
    customerId: string,
    limits: Limits,
    cycleStart: string,
    billable: boolean,
    /** Events for a month's count moving from `before` to `after` (quota.threshold), written in the same transaction. */
    onCount?: (before: number, after: number) => OutboxEvent[],
  ): Promise<ReserveOutcome>;
  /** Gives back a live-capsule slot (destroy, expiry, failed create). */
  releaseLive(customerId: string): Promise<void>;
  /** Undoes a reservation whose capsule never came to exist. */
  unreserveCapsule(customerId: string, billable: boolean): Promise<void>;

  // Capsules
  /**
   * Inserts the capsule and its first activity event in one transaction that
   * first locks the rows the capsule pins (its finalized Capsulefile, its egress
   * profile) and inserts nothing when one is gone: a DELETE of either is
   * ordered before or after the insert, never beside it. The capsule's usage
   * item is written in the same transaction.
   */
  insertCapsule(
    c: Capsule,
    first: { type: string; at: string; fields: Record<string, unknown> },
    usage: UsageEntry,
    /** Webhook events of the create (capsule.created), written in the same transaction. */
    events?: OutboxEvent[],
    /** The Idempotency-Key of the create: the capsule id is written on it in the same transaction. */
    idempotencyKey?: string,
  ): Promise<InsertCapsuleOutcome>;
  getCapsule(id: string): Promise<Capsule | null>;
  listCapsules(customerId: string, limit: number, cursor: string | null): Promise<CapsulePage>;
  /** Compare-and-set on status; true when the row moved. */
  transition(id: string, from: readonly CapsuleStatus[], to: CapsuleStatus, destroyedAt?: string): Promise<boolean>;
  /** Counts executions and bytes on the capsule, with the exec's usage item in the same transaction. */
  addUsage(id: string, executions: number, bytes: number, usage?: UsageEntry): Promise<void>;
  liveCapsules(): Promise<Capsule[]>;
  expiredLiveCapsules(nowIso: string): Promise<Capsule[]>;
  /**
   * Takes or renews the named lease for `owner` until `untilIso`; true when
   * `owner` holds it (it was free, expired, or already its own). With several
   * control planes on one database, one of them runs the named job at a time.
   */
  claimLease(name: string, owner: string, nowIso: string, untilIso: string): Promise<boolean>;
  /** Gives the lease up at once if `owner` holds it (a clean stop; a crash lets it expire). */
  releaseLease(name: string, owner: string): Promise<void>;
  /** Counts one request of `key` in the window starting at `windowStartMs`; the window's count so far. */
  countRateHit(key: string, windowStartMs: number): Promise<number>;

  // Activity trail
  /**
   * Appends the next event (seq from 1) and, in the same transaction, the
   * side effects that belong to it: usage counters and a status move.
   */
  appendActivity(
    capsuleId: string,
    type: string,
    at: string,
    fields: Record<string, unknown>,
    side?: ActivitySide,
  ): Promise<ActivityEvent | null>;
  /** Events after `afterSeq` in order, at most `limit` (trails are read in pages, never whole). */
  activityPage(capsuleId: string, afterSeq: number, limit: number): Promise<ActivityEvent[]>;
  activityDrops(capsuleId: string): Promise<ActivityDrops>;
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
  /** The capsule's proof awaiting its signature (signed or not), or null. */
  getPendingProof(capsuleId: string): Promise<PendingProof | null>;
  /** Unsigned pending proofs, oldest first. */
  unsignedProofs(limit: number): Promise<PendingProof[]>;
  /**
   * Phase 2: stores the signed proof with its usage, proof count and events,
   * and marks the pending row signed, in one transaction; false (nothing
   * written) when another process signed it first.
   */
  completePendingProof(p: PendingProof, proof: StoredProof, usage: UsageEntry, events: OutboxEvent[]): Promise<boolean>;

  insertContact(c: ContactMessage): Promise<void>;

  // Idempotency
  /**
   * Claims the key, or reports it done or pending; a pending claim not renewed since
   * `staleBeforeIso` (its process died mid-request) is taken over and answered `claimed`.
   */
  claimIdempotency(
    customerId: string,
    key: string,
    requestHash: string,
    nowIso: string,
    notBeforeIso: string,
    staleBeforeIso: string,
  ): Promise<IdempotencyClaim>;
  /** The request holding the claim is alive (renewed every few seconds while it runs). */
  renewIdempotency(customerId: string, key: string, nowIso: string): Promise<void>;
  completeIdempotency(customerId: string, key: string, response: IdempotentResponse): Promise<void>;
  releaseIdempotency(customerId: string, key: string): Promise<void>;
}

// ---- Egress profiles (SPEC "Egress profiles") and the sealed egress layer

export interface EgressProfilePage {
  items: EgressProfile[];
  next_cursor: string | null;
}
export interface EgressRulePage {
  items: EgressRule[];
  next_cursor: string | null;
}
export type ProfileDeleteOutcome = 'deleted' | 'missing' | 'in_use';

/** Storage of egress profiles and rules. Unique violations come back as ApiError resource_conflict. */
export interface EgressProfileStore {
  insertProfile(p: EgressProfile): Promise<void>;
  getProfile(id: string): Promise<EgressProfile | null>;
  /** The account's profile of that name (the default profile is found this way). */
  profileByName(customerId: string, name: string): Promise<EgressProfile | null>;
  listProfiles(customerId: string, limit: number, cursor: string | null): Promise<EgressProfilePage>;
  updateProfile(id: string, set: { name?: string; description?: string }): Promise<EgressProfile | null>;
  /** Refuses ('in_use') while a live capsule references the profile; rules go with it. */
  deleteProfile(id: string): Promise<ProfileDeleteOutcome>;
  /**
   * Inserts the rule in a transaction that locks its profile row (as the
   * profile DELETE does) and counts its rules: 'missing' when the profile is
   * gone, 'limit' when it already holds `maxPerProfile` rules.
   */
  insertRule(r: EgressRule, maxPerProfile: number): Promise<'ok' | 'missing' | 'limit'>;
  getRule(id: string): Promise<EgressRule | null>;
  /** Rules of one profile (profileId) or of the whole account (null), oldest first. */
  listRules(
    customerId: string,
    profileId: string | null,
    limit: number,
    cursor: string | null,
  ): Promise<EgressRulePage>;
  /** Every rule of a profile, oldest first (capsule create). */
  allRules(profileId: string): Promise<EgressRule[]>;
  deleteRule(id: string): Promise<boolean>;
}

/** What one capsule's sealed egress layer enforces. */
export interface EgressSpec {
  capsuleId: string;
  rules: { kind: EgressRuleKind; value: string; port: number }[];
  /** Capsulefile egress_declaration ([] when none: nothing passes the AND). */
  declaration: string[];
  mcpPolicy?: { allowed_tools?: string[]; prohibited_tools?: string[] };
}

/** An activity event from the egress layer, without `seq` (the trail assigns it). */
export interface EgressActivity {
  type: string;
  at: string;
  [field: string]: unknown;
}

export interface RunningEgress {
  /** Unix socket the runner bridges into the capsule's network namespace. */
  proxySocket: string;
  /** PEM of the per-capsule CA the workload trusts. */
  caPem: string;
  /** Closes every connection, destroys the CA/leaf keys; returns step 4 evidence. Idempotent. */
  stop(): Promise<Record<string, unknown>>;
}

/** Starts one capsule's sealed egress layer (the egress adapter). Invalid config throws EgressConfigError. */
export interface EgressLauncher {
  /** onEvent's promise (if any) settles once the event is stored; the layer bounds how many are unsettled. */
  start(spec: EgressSpec, onEvent: (e: EgressActivity) => void | Promise<unknown>): Promise<RunningEgress>;
}

/** A profile/declaration/policy the egress layer cannot enforce: the message names the field. */
export class EgressConfigError extends Error {}

/**
 * Encryption of secrets at rest under the operator's master key (adapter:
 * control-plane/secrets/envelope.ts). `context` binds a value to where it is
 * stored (e.g. `webhook:<id>:signing_secret`): opening it under any other
 * context fails.
 */
export interface SecretBox {
  sealString(plaintext: string, context: string): string;
  /** Throws when the value was sealed under another key or context, or was altered. */
  openString(sealed: string, context: string): string;
}

// ---- API keys and MFA (docs/ACCOUNTS.md)

export interface ApiKeyPage {
  items: ApiKeyRecord[];
  next_cursor: string | null;
}

export interface NewApiKey {
  record: ApiKeyRecord;
  key_hash: string;
}

export type RevokeOutcome = 'revoked' | 'missing' | 'already_revoked' | 'last_live_key';
export type RotateOutcome = 'rotated' | 'missing' | 'already_revoked';

/** The TOTP factor of an account. */
export interface MfaFactor {
  customer_id: string;
  /** The base32 secret, sealed with the SecretBox under `mfa:<customer_id>:totp_secret`. */
  secret_sealed: string;
  state: 'pending' | 'active';
  created_at: string;
  activated_at: string | null;
  /** Last accepted TOTP time step (codes at or before it are refused: no replay). */
  last_step: number | null;
  recovery_codes_remaining: number;
}

/** Storage of API keys and the MFA factor. Every outcome is decided inside one transaction. */
export interface KeyStore {
  /** The account's keys, newest first. */
  listApiKeys(customerId: string, limit: number, cursor: string | null): Promise<ApiKeyPage>;
  getApiKey(customerId: string, id: string): Promise<ApiKeyRecord | null>;
  /** 'limit' when the account already holds `maxActive` keys not revoked. */
  insertApiKey(k: NewApiKey, maxActive: number): Promise<'ok' | 'limit'>;
  /** Revokes at `nowIso`; never the account's last live key without a revocation scheduled. */
  revokeApiKey(customerId: string, id: string, nowIso: string): Promise<RevokeOutcome>;
  /** Inserts the successor and schedules the old key's end at `endsAtIso`. */
  rotateApiKey(customerId: string, id: string, successor: NewApiKey, endsAtIso: string): Promise<RotateOutcome>;
  /** Operator recovery of a lost key: revokes every key of the account and inserts `successor`; null = no such email. */
  replaceApiKeysByEmail(email: string, make: (customerId: string) => NewApiKey, nowIso: string): Promise<string | null>;
  markMfaVerified(keyId: string, untilIso: string): Promise<void>;

  getMfa(customerId: string): Promise<MfaFactor | null>;
  /** Stores a pending factor and its recovery code hashes (replacing a pending one); 'active' when one is active. */
  putPendingMfa(f: MfaFactor, recoveryCodeHashes: string[]): Promise<'ok' | 'active'>;
  /**
   * Takes one code attempt from the account's budget (`max` per window; a
   * window that began at or before `windowStartIso` is over); a correct code
   * gives the budget back.
   * Returns null when taken, else when the current window began.
   */
  takeMfaAttempt(customerId: string, nowIso: string, windowStartIso: string, max: number): Promise<string | null>;
  resetMfaAttempts(customerId: string): Promise<void>;
  /** Accepts a TOTP time step only if later than the last accepted one (atomic). */
  acceptTotpStep(customerId: string, step: number): Promise<boolean>;
  /** Marks a recovery code used, once (atomic); false when unknown or used. */
  useRecoveryCode(customerId: string, codeHash: string, nowIso: string): Promise<boolean>;
  activateMfa(customerId: string, nowIso: string): Promise<boolean>;
  deleteMfa(customerId: string): Promise<boolean>;
}

// ---- Usage (docs/ACCOUNTS.md "Usage")

export interface UsagePage {
  items: UsageItem[];
  next_cursor: string | null;
}

export interface UsageQuery {
  /** Inclusive lower bound on created_at (ISO, contract form), or null. */
  from: string | null;
  /** Exclusive upper bound, or null. */
  to: string | null;
  limit: number;
  /** `created_at|id` of the last item of the previous page (oldest first). */
  cursor: string | null;
}

export interface UsageTotals {
  live: UsageCounts;
  test: UsageCounts;
  /** Bytes processed by the cycle's billable capsules (the capsules' `bytes_processed`). */
  bytes_processed: number;
}

export interface UsageStore {
  listUsage(customerId: string, q: UsageQuery): Promise<UsagePage>;
  /** Totals of items created at or after `fromIso`. */
  usageTotals(customerId: string, fromIso: string): Promise<UsageTotals>;
}

// ---- Billing through a payment processor (docs/ACCOUNTS.md "Billing")

export type PurchasableTier = 'starter' | 'business';

export interface CheckoutRequest {
  customer_id: string;
  email: string;
  tier: PurchasableTier;
  /** The processor's price id for the tier. */
  price: string;
  success_url: string;
  cancel_url: string;
  /** Forwarded so a retried checkout creates one session. */
  idempotency_key: string | null;
}

export interface CheckoutSession {
  id: string;
  url: string;
  /** Unix seconds. */
  expires_at: number;
}

/** A verified processor event, reduced to what changes a tier. */
export type BillingEvent =
  | {
      id: string;
      type: 'checkout_completed';
      customer_id: string | null;
      tier: string | null;
      processor_customer: string | null;
      subscription: string | null;
      paid: boolean;
    }
  | { id: string; type: 'subscription_ended'; subscription: string }
  | { id: string; type: 'other'; name: string };

export interface CheckoutPort {
  createCheckout(r: CheckoutRequest): Promise<CheckoutSession>;
}

export interface WebhookVerifier {
  /** The event if `signature` signs `payload` (within the tolerance of `nowMs`); throws BillingSignatureError. */
  verify(payload: Uint8Array, signature: string, nowMs: number): BillingEvent;
}

export class BillingSignatureError extends Error {}

export type TierChange =
  | {
      kind: 'subscribed';
      customer_id: string;
      tier: Tier;
      processor_customer: string | null;
      subscription: string | null;
    }
  | { kind: 'ended'; subscription: string };

export interface BillingStore {
  /**
   * One transaction: records the event id (a replay returns 'duplicate' and
   * changes nothing), then applies the change. 'ignored' when the change names
   * no known account or subscription.
   */
  applyBillingEvent(
    event: { id: string; type: string; received_at: string },
    change: TierChange | null,
  ): Promise<'applied' | 'duplicate' | 'ignored'>;
}

/** The managed authority's current key, handed to one signing call (its private bytes zeroized after). */
export interface ManagedSigningKey {
  signing_authority_id: string;
  signing_key_version: number;
  key_id: string;
  publicKey: Uint8Array;
  privateKey: Uint8Array;
}

/** One public key entry of the trust manifest (raw base64 public key). */
export interface TrustManifest {
  authorities: {
    signing_authority_id: string;
    keys: { signing_key_version: number; public_key: string }[];
  }[];
}

/** A Capsulefile's `signing_config`: where and how the customer co-signs each activity event. */
export interface CosignConfig {
  endpoint: string;
  algorithm: 'Ed25519' | 'RSA-PSS-SHA256';
  /** PEM (SPKI) public key the signatures must verify under. */
  public_key: string;
  /** PEM CA certificate(s) the signer's server certificate must chain to; absent = the system roots. */
  ca_cert?: string;
}

/**
 * Customer co-signing, fire-and-buffer: `submit` never waits on the signer;
 * `collect` ends a capsule's session and returns one attestation per event
 * submitted (a signature that verified, or missing), null when none was open.
 */
export interface CosignPort {
  open(capsuleId: string, config: CosignConfig): void;
  isOpen(capsuleId: string): boolean;
  submit(capsuleId: string, event: ActivityEvent): void;
  collect(capsuleId: string): Promise<CustomerAttestation[] | null>;
  close(): void;
}

/** A managed signing authority; private keys never leave it except for the duration of `withKey`. */
export interface SignerPort {
  /**
   * Runs `f` with a copy of the current (highest available) key, zeroized when `f` returns;
   * null when the key is unavailable (file missing or unparsable).
   */
  withKey<T>(f: (key: ManagedSigningKey) => T): T | null;
  /** The public key record of an authority key id, or null. */
  keyRecord(keyId: string): KeyRecord | null;
  /** This install's authority and every version whose public key it has read. */
  manifest(): TrustManifest;
  /** Zeroizes every private key held. */
  close(): void;
}

// ---- Several runners (docs/CONTROL_PLANE.md "Several runners")

/** One runner as the control planes last saw it (they keep the registry from their heartbeats). */
export interface RunnerNode {
  node_id: string;
  /** host:port the control planes reach it at. */
  address: string;
  labels: Record<string, string>;
  /** Its hello's capacity at the last heartbeat; null when it reported none. */
  capacity: { memory_mb: number; committed_mb: number; free_mb: number; capsules: number; max_capsules: number } | null;
  /** Last time any control plane reached it (ms since the epoch). */
  heartbeat_ms: number;
  /** `capsule admin drain`: no new placements; its capsules run on until destroyed. */
  draining: boolean;
  /** When a control plane declared it lost (its live capsules end expired_unclean); null while live. */
  lost_ms: number | null;
}

export interface RunnerRegistry {
  /** Records a successful hello: upserts the node, refreshes capacity and heartbeat, clears `lost`. */
  heartbeat(n: Pick<RunnerNode, 'node_id' | 'address' | 'labels' | 'capacity'>, nowMs: number): Promise<void>;
  runnerNodes(): Promise<RunnerNode[]>;
  /** Sets or clears draining; false when no such node is registered. */
  setDraining(nodeId: string, draining: boolean): Promise<boolean>;
  /**
   * Declares lost every live node whose last heartbeat is older than `lostAfterMs`; returns the
   * nodes this call declared (one conditional update: whichever control plane runs it first).
   */
  declareLost(nowMs: number, lostAfterMs: number): Promise<string[]>;
  /** Records where a capsule runs, before the runner is asked to create it (a destroy's status move deletes it). */
  place(capsuleId: string, nodeId: string, memoryMb: number, nowMs: number): Promise<void>;
  /** A create that no runner took. */
  unplace(capsuleId: string): Promise<void>;
  /**
   * Memory placed per node, from every control plane: live capsules, and creates placed since
   * `inFlightSinceMs` whose row is not written yet.
   */
  placedMemory(inFlightSinceMs: number): Promise<Map<string, number>>;
  /** Drops placements older than `beforeMs` of capsules not live (creates undone, capsules given up). */
  prunePlacements(beforeMs: number): Promise<number>;
  placementOf(capsuleId: string): Promise<{ node_id: string; placed_ms: number } | null>;
  /** Live capsules placed on `nodeId`. */
  liveCapsulesOn(nodeId: string): Promise<Capsule[]>;
  /** Live capsules placed on nodes declared lost, at most `limit`. */
  liveCapsulesOnLostNodes(limit: number): Promise<Capsule[]>;
}
