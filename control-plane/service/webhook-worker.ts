// The webhook delivery worker: claims due attempts from the outbox under a
// lease, signs and sends them (bounded by p-queue: a global concurrency and a
// per-endpoint bound, so one slow receiver holds at most its own slots), and
// records each outcome with the next attempt of the fixed retry schedule in
// one transaction. At-least-once: a process killed mid-attempt leaves the row
// pending; another claims it when the lease ends and sends the same evt_ id.
import PQueue from 'p-queue';
import { signWebhook, WEBHOOK_SIGNATURE_HEADER } from '../../shared/webhook-signature.js';
import {
  WEBHOOK_MAX_ATTEMPTS,
  WEBHOOK_RETRY_DELAYS_MS,
  type AttemptOutcome,
  type ClaimedDelivery,
} from '../domain/index.js';
import { isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { newId } from './ids.js';
import { webhookSecretContext } from './webhooks.js';

/** Header carrying the event id, so receivers drop duplicates. */
export const WEBHOOK_ID_HEADER = 'Svc-Webhook-Id';
/** Finished attempts and their events are kept this long. */
export const WEBHOOK_RETENTION_MS = 30 * 24 * 3600_000;
const PRUNE_EVERY_MS = 3600_000;
/** Non-replay attempts in flight per account while a replay of that account runs (throttled, not dropped). */
const THROTTLED_PER_ACCOUNT = 1;

export class WebhookWorker {
  /** Lease holder id of this process. */
  readonly owner: string;
  private readonly queue: PQueue;
  private readonly perEndpoint = new Map<string, number>();
  private readonly throttled = new Map<string, number>();
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private lastPrune = 0;

  constructor(private readonly d: Deps) {
    this.owner = newId('wkr_', d.random, 8);
    this.queue = new PQueue({ concurrency: Math.max(1, d.webhooks.concurrency) });
  }

  /** The lease outlives one attempt's timeout with margin: a live attempt is never claimed twice. */
  private get leaseMs(): number {
    return this.d.webhooks.timeoutMs * 2 + 30_000;
  }

  start(): void {
    if (this.d.webhooks.concurrency === 0 || this.timer) return;
    this.timer = setInterval(() => this.kick(), this.d.webhooks.pollMs);
    this.timer.unref();
    this.kick();
  }

  /** Reads the outbox now (an event committed, an attempt finished, a replay queued). */
  kick(): void {
    if (this.stopped || this.d.webhooks.concurrency === 0) return;
    if (this.ticking) {
      this.again = true;
      return;
    }
    this.ticking = this.loop().finally(() => {
      this.ticking = null;
    });
  }

  private inflight(): number {
    return this.queue.pending + this.queue.size;
  }

  private async loop(): Promise<void> {
    do {
      this.again = false;
      try {
        await this.tick();
      } catch (e) {
        this.d.log.error({ err: e }, 'webhook worker: claiming failed; retrying next poll');
        return;
      }
    } while (this.again && !this.stopped);
  }

  private async tick(): Promise<void> {
    const nowMs = this.d.clock.nowMs();
    if (nowMs - this.lastPrune > PRUNE_EVERY_MS) {
      this.lastPrune = nowMs;
      await this.d.webhooks.store.prune(isoMicros(nowMs - WEBHOOK_RETENTION_MS));
    }
    const free = this.d.webhooks.concurrency - this.inflight();
    if (free <= 0) return;
    const cap = this.d.webhooks.perEndpoint;
    const busy = [...this.perEndpoint].filter(([, n]) => n >= cap).map(([id]) => id);
    const claimed = await this.d.webhooks.store.claimDue({
      owner: this.owner,
      nowIso: isoMicros(nowMs),
      leaseUntilIso: isoMicros(nowMs + this.leaseMs),
      limit: free,
      perEndpoint: cap,
      skipEndpoints: busy,
    });
    if (claimed.length === 0) return;
    const replaying = claimed.some((c) => !c.replay)
      ? new Set(await this.d.webhooks.store.accountsReplaying())
      : new Set<string>();
    let started = 0;
    for (const c of claimed) {
      const throttle = !c.replay && replaying.has(c.customer_id);
      if (
        (this.perEndpoint.get(c.endpoint_id) ?? 0) >= cap ||
        (throttle && (this.throttled.get(c.customer_id) ?? 0) >= THROTTLED_PER_ACCOUNT)
      ) {
        await this.d.webhooks.store.releaseClaim(c.id, this.owner);
        continue;
      }
      started++;
      this.track(c, throttle, +1);
      void this.queue.add(async () => {
        try {
          await this.attempt(c);
        } finally {
          this.track(c, throttle, -1);
          this.kick();
        }
      });
    }
    // A full batch means more may be due now.
    if (started > 0 && claimed.length >= free) this.again = true;
  }

  private track(c: ClaimedDelivery, throttle: boolean, by: 1 | -1): void {
    const bump = (m: Map<string, number>, k: string): void => {
      const n = (m.get(k) ?? 0) + by;
      if (n <= 0) m.delete(k);
      else m.set(k, n);
    };
    bump(this.perEndpoint, c.endpoint_id);
    if (throttle) bump(this.throttled, c.customer_id);
  }

  /** A lease of this process from now (an attempt inserted already claimed). */
  leaseNow(): { owner: string; leaseUntilIso: string } {
    return { owner: this.owner, leaseUntilIso: isoMicros(this.d.clock.nowMs() + this.leaseMs) };
  }

  /** Claims one attempt (or takes one leased to this process) and sends it inline (POST /v1/webhooks/:id/test). */
  async deliverNow(deliveryId: string): Promise<void> {
    const nowMs = this.d.clock.nowMs();
    const c = await this.d.webhooks.store.claimOne(deliveryId, {
      owner: this.owner,
      nowIso: isoMicros(nowMs),
      leaseUntilIso: isoMicros(nowMs + this.leaseMs),
    });
    if (!c) return;
    this.track(c, false, +1);
    try {
      await this.attempt(c);
    } finally {
      this.track(c, false, -1);
    }
  }

  /** Signs, sends and records one claimed attempt. */
  private async attempt(c: ClaimedDelivery): Promise<void> {
    let secret: string;
    try {
      secret = this.d.secrets.openString(c.secret_sealed, webhookSecretContext(c.endpoint_id));
    } catch (e) {
      // Sealed under another master key: no delivery can be signed; counts as a failed attempt.
      this.d.log.error({ err: e, webhook_id: c.endpoint_id }, 'webhook signing secret does not open');
      await this.record(c, { status: null, body: null, duration_ms: 0, error: 'signing secret unavailable' });
      return;
    }
    const t = Math.floor(this.d.clock.nowMs() / 1000);
    const headers = {
      'content-type': 'application/json',
      'user-agent': 'Capsule-Webhooks/1',
      [WEBHOOK_ID_HEADER]: c.event_id,
      [WEBHOOK_SIGNATURE_HEADER]: signWebhook(secret, t, c.payload),
      'Svc-Webhook-Event': c.event_type,
      'Svc-Webhook-Attempt': String(c.attempt_number),
    };
    const res = await this.d.webhooks.sender.send(c.url, headers, c.payload, this.d.webhooks.timeoutMs);
    await this.record(c, res);
  }

  private async record(
    c: ClaimedDelivery,
    res: { status: number | null; body: string | null; duration_ms: number; error: string | null },
  ): Promise<void> {
    const nowMs = this.d.clock.nowMs();
    const ok = res.status !== null && res.status >= 200 && res.status < 300;
    let outcome: AttemptOutcome['status'];
    let next: AttemptOutcome['next'] = null;
    if (ok) outcome = 'succeeded';
    else if (c.replay || c.attempt_number >= WEBHOOK_MAX_ATTEMPTS) outcome = 'dead_lettered';
    else {
      outcome = 'failed';
      next = { due_at: isoMicros(nowMs + WEBHOOK_RETRY_DELAYS_MS[c.attempt_number - 1]!) };
    }
    const error = res.error ?? (ok ? null : res.status !== null ? `HTTP ${res.status}` : 'no response');
    const kept = await this.d.webhooks.store.completeAttempt(c.id, this.owner, {
      status: outcome,
      response_status: res.status,
      response_body: res.body,
      duration_ms: Math.round(res.duration_ms),
      error: ok ? null : error,
      attempted_at: isoMicros(nowMs),
      next,
    });
    if (!kept) this.d.log.warn({ delivery_id: c.id }, 'webhook attempt finished after its lease ended');
    else if (!ok)
      this.d.log.info(
        {
          delivery_id: c.id,
          webhook_id: c.endpoint_id,
          attempt: c.attempt_number,
          status: res.status,
          error,
          outcome,
        },
        'webhook attempt failed',
      );
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.ticking;
    await this.queue.onIdle();
  }
}
