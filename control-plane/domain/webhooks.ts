// Webhooks: the event catalog, endpoint and delivery records, the retry
// schedule, and the ports the webhook service needs (storage, sending).
// docs/WEBHOOKS.md documents every event with an example payload.

/** The closed event catalog (docs/WEBHOOKS.md). */
export const WEBHOOK_EVENT_TYPES = [
  'cdp.generated',
  'capsule.created',
  'capsule.destroyed',
  'capsule.expired',
  'capsule.failed',
  'capsulefile.finalized',
  'quota.threshold',
  'webhook.test',
] as const;
export type WebhookEventType = (typeof WEBHOOK_EVENT_TYPES)[number];

/**
 * Delays after a failed attempt n (1-based) before attempt n+1: five retries
 * (1 min, 5 min, 30 min, 2 h, 10 h); when attempt 6 fails the delivery is dead-lettered.
 */
export const WEBHOOK_RETRY_DELAYS_MS: readonly number[] = Object.freeze([
  60_000,
  5 * 60_000,
  30 * 60_000,
  2 * 3600_000,
  10 * 3600_000,
]);
export const WEBHOOK_MAX_ATTEMPTS = WEBHOOK_RETRY_DELAYS_MS.length + 1;
/** Bytes of a receiver's response body kept on the delivery record. */
export const WEBHOOK_RESPONSE_BODY_MAX = 1024;

/**
 * An event written to the outbox in the transaction of the state change that
 * causes it. `payload` is the exact body every delivery sends:
 * `{"id":"evt_…","type","created_at","data":{…}}`.
 */
export interface OutboxEvent {
  id: string;
  customer_id: string;
  type: WebhookEventType;
  created_at: string;
  payload: string;
}

export interface WebhookEndpoint {
  id: string;
  customer_id: string;
  url: string;
  events: WebhookEventType[];
  description: string;
  active: boolean;
  /** `whsec_…`, sealed with the SecretBox under `webhook:<id>:signing_secret`. */
  secret_sealed: string;
  created_at: string;
  updated_at: string;
}

export type DeliveryStatus = 'pending' | 'succeeded' | 'failed' | 'dead_lettered';

/** One attempt of one event to one endpoint. */
export interface WebhookDelivery {
  id: string;
  endpoint_id: string;
  customer_id: string;
  event_id: string;
  event_type: string;
  attempt_number: number;
  status: DeliveryStatus;
  response_status: number | null;
  response_body: string | null;
  duration_ms: number | null;
  /** Why an attempt failed without an HTTP status (timeout, refused address, TLS ...). */
  error: string | null;
  /** For a failed attempt: when the next one is due; for a pending one: when it is due. */
  next_attempt_at: string | null;
  attempted_at: string | null;
  created_at: string;
  /** Re-queued from the dead-letter queue by an admin replay. */
  replay: boolean;
  /** Set on a dead-lettered record once an admin replay re-queued it. */
  replayed_at: string | null;
}

/** A claimed pending attempt with what sending it needs. */
export interface ClaimedDelivery extends WebhookDelivery {
  url: string;
  secret_sealed: string;
  payload: string;
}

export interface AttemptOutcome {
  status: 'succeeded' | 'failed' | 'dead_lettered';
  response_status: number | null;
  response_body: string | null;
  duration_ms: number;
  error: string | null;
  attempted_at: string;
  /** The next attempt, when one is scheduled. */
  next: { due_at: string } | null;
}

export interface WebhookPage<T> {
  items: T[];
  next_cursor: string | null;
}

export interface ClaimOptions {
  /** Lease holder (one id per process). */
  owner: string;
  nowIso: string;
  leaseUntilIso: string;
  /** Most rows claimed in total. */
  limit: number;
  /** Most rows claimed per endpoint. */
  perEndpoint: number;
  /** Endpoints this process is already delivering to at its bound. */
  skipEndpoints: string[];
  /** Accounts this process already holds its bound of attempts for. */
  skipCustomers?: string[];
}

export interface WebhookStore {
  /** 'limit' when the account already has `max` endpoints. */
  insertEndpoint(e: WebhookEndpoint, max: number): Promise<'ok' | 'limit'>;
  getEndpoint(id: string): Promise<WebhookEndpoint | null>;
  listEndpoints(customerId: string, limit: number, cursor: string | null): Promise<WebhookPage<WebhookEndpoint>>;
  updateEndpoint(
    id: string,
    set: Partial<Pick<WebhookEndpoint, 'url' | 'events' | 'description' | 'active' | 'updated_at'>>,
  ): Promise<WebhookEndpoint | null>;
  /** Removes the endpoint with its deliveries. */
  deleteEndpoint(id: string): Promise<boolean>;
  /**
   * Writes an event addressed to one endpoint only (webhook.test) and its first
   * attempt, already leased to `lease.owner` when given (the inline test
   * delivery, which no other worker may take first); the attempt's id.
   */
  insertDirectEvent(
    ev: OutboxEvent,
    endpointId: string,
    lease?: { owner: string; leaseUntilIso: string },
  ): Promise<string>;
  getDelivery(id: string): Promise<WebhookDelivery | null>;
  /** Attempts to one endpoint, newest first. */
  listDeliveries(endpointId: string, limit: number, cursor: string | null): Promise<WebhookPage<WebhookDelivery>>;
  /**
   * Claims due pending attempts under a lease, in one conditional UPDATE per
   * row set: a row leased by another process (lease not yet over) is never claimed.
   */
  claimDue(o: ClaimOptions): Promise<ClaimedDelivery[]>;
  /** Claims one attempt by id (the inline test delivery); null when not pending or leased by another owner. */
  claimOne(id: string, o: Pick<ClaimOptions, 'owner' | 'nowIso' | 'leaseUntilIso'>): Promise<ClaimedDelivery | null>;
  /** Gives a claimed attempt back unsent (throttling); it stays pending. */
  releaseClaim(id: string, owner: string): Promise<void>;
  /**
   * Records the attempt's outcome and, in the same transaction, inserts the
   * next attempt. False when this process no longer holds the lease.
   */
  completeAttempt(id: string, owner: string, o: AttemptOutcome): Promise<boolean>;
  /** Dead-lettered attempts not yet replayed, newest first. */
  listDeadLetters(customerId: string, limit: number, cursor: string | null): Promise<WebhookPage<WebhookDelivery>>;
  /** Re-queues (all, or the given) dead letters of the account as pending replay attempts; how many. */
  replayDeadLetters(customerId: string, ids: string[] | null, nowIso: string, max: number): Promise<number>;
  /** When the account's oldest replay still pending was queued; null when none is. */
  replayInProgressSince(customerId: string): Promise<string | null>;
  /** Accounts with replay attempts still pending. */
  accountsReplaying(): Promise<string[]>;
  /** Deletes finished attempts and events created before `beforeIso`; rows removed. */
  prune(beforeIso: string): Promise<number>;
}

export interface WebhookSendResult {
  /** HTTP status, null when no response arrived. */
  status: number | null;
  /** The first WEBHOOK_RESPONSE_BODY_MAX bytes of the response body (UTF-8, lossy). */
  body: string | null;
  duration_ms: number;
  /** Why no usable response came (refused address, timeout, TLS, connect ...). */
  error: string | null;
}

/** Sends one signed delivery (adapter: control-plane/webhooks/). Never throws. */
export interface WebhookSender {
  /** Why a URL is refused before any DNS (an address literal in a refused range), or null. */
  refusal(url: string): string | null;
  send(url: string, headers: Record<string, string>, body: string, timeoutMs: number): Promise<WebhookSendResult>;
}
