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

/** Claimed attempts held per slot (waiting for a slot of their endpoint), so one claim feeds several sends. */
const HOLD_PER_SLOT = 4;

interface Held {
  c: ClaimedDelivery;
  throttle: boolean;
  leaseUntilMs: number;
}

export class WebhookWorker {
  /** Lease holder id of this process. */
  readonly owner: string;
  private readonly queue: PQueue;
  /** Attempts sending, per endpoint and per account. */
  private readonly sendingEp = new Map<string, number>();
  private readonly sendingAcct = new Map<string, number>();
  private readonly throttled = new Map<string, number>();
  /** Claimed attempts per endpoint and per account (sending or waiting). */
  private readonly heldEp = new Map<string, number>();
  private readonly heldAcct = new Map<string, number>();
  /** Claimed attempts waiting for a slot, oldest claim first. */
  private waiting: Held[] = [];
  private sending = 0;
  private timer: NodeJS.Timeout | null = null;
  private ticking: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private lastPrune = 0;
  /** Slots one endpoint and one account may use: never all of them, so one slow receiver cannot stall the others. */
  private readonly epCap: number;
  private readonly acctCap: number;

  constructor(private readonly d: Deps) {
    this.owner = newId('wkr_', d.random, 8);
    const c = Math.max(1, d.webhooks.concurrency);
    // Sends are bounded by the slot counters below; the queue also runs the records that follow them.
    this.queue = new PQueue({ concurrency: c * 2 });
    const half = Math.max(1, Math.floor(c / 2));
    this.acctCap = half;
    this.epCap = Math.min(d.webhooks.perEndpoint, half);
  }

  /** The lease outlives one attempt's timeout with margin: a live attempt is never claimed twice. */
  private get leaseMs(): number {
    return this.d.webhooks.timeoutMs * (HOLD_PER_SLOT + 1) + 30_000;
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

  private held(): number {
    return this.sending + this.waiting.length;
  }

  private async tick(): Promise<void> {
    const nowMs = this.d.clock.nowMs();
    if (nowMs - this.lastPrune > PRUNE_EVERY_MS) {
      this.lastPrune = nowMs;
      await this.d.webhooks.store.prune(isoMicros(nowMs - WEBHOOK_RETENTION_MS));
    }
    const c = this.d.webhooks.concurrency;
    const free = c * HOLD_PER_SLOT - this.held();
    if (free <= 0) return;
    const epHold = this.epCap * HOLD_PER_SLOT;
    const acctHold = this.acctCap * HOLD_PER_SLOT;
    const full = (m: Map<string, number>, cap: number): string[] => [...m].filter(([, n]) => n >= cap).map(([k]) => k);
    const claimed = await this.d.webhooks.store.claimDue({
      owner: this.owner,
      nowIso: isoMicros(nowMs),
      leaseUntilIso: isoMicros(nowMs + this.leaseMs),
      limit: free,
      perEndpoint: epHold,
      skipEndpoints: full(this.heldEp, epHold),
      skipCustomers: full(this.heldAcct, acctHold),
    });
    if (claimed.length === 0) return;
    const replaying = claimed.some((x) => !x.replay)
      ? new Set(await this.d.webhooks.store.accountsReplaying())
      : new Set<string>();
    let kept = 0;
    for (const x of claimed) {
      if ((this.heldEp.get(x.endpoint_id) ?? 0) >= epHold || (this.heldAcct.get(x.customer_id) ?? 0) >= acctHold) {
        await this.d.webhooks.store.releaseClaim(x.id, this.owner);
        continue;
      }
      kept++;
      bump(this.heldEp, x.endpoint_id, 1);
      bump(this.heldAcct, x.customer_id, 1);
      this.waiting.push({
        c: x,
        throttle: !x.replay && replaying.has(x.customer_id),
        leaseUntilMs: nowMs + this.leaseMs,
      });
    }
    this.pump();
    // A full batch means more may be due now.
    if (kept > 0 && claimed.length >= free) this.again = true;
  }

  /** Starts every waiting attempt whose endpoint, account and the process have a free slot. */
  private pump(): void {
    if (this.waiting.length === 0) return;
    const c = this.d.webhooks.concurrency;
    const rest: Held[] = [];
    for (const h of this.waiting) {
      const x = h.c;
      if (
        this.stopped ||
        this.sending >= c ||
        (this.sendingEp.get(x.endpoint_id) ?? 0) >= this.epCap ||
        (this.sendingAcct.get(x.customer_id) ?? 0) >= this.acctCap ||
        (h.throttle && (this.throttled.get(x.customer_id) ?? 0) >= THROTTLED_PER_ACCOUNT)
      ) {
        rest.push(h);
        continue;
      }
      this.send(h);
    }
    this.waiting = rest;
  }

  private send(h: Held): void {
    const x = h.c;
    this.sending++;
    bump(this.sendingEp, x.endpoint_id, 1);
    bump(this.sendingAcct, x.customer_id, 1);
    if (h.throttle) bump(this.throttled, x.customer_id, 1);
    // The slot is the receiver's: it frees when the response is in, and the record is written
    // while the next attempt to that endpoint is already on its way.
    let freed = false;
    const free = (): void => {
      if (freed) return;
      freed = true;
      this.sending--;
      bump(this.sendingEp, x.endpoint_id, -1);
      bump(this.sendingAcct, x.customer_id, -1);
      this.pump();
    };
    void this.queue.add(async () => {
      try {
        // A claim that waited too long to finish inside its lease goes back unsent.
        if (this.d.clock.nowMs() + this.d.webhooks.timeoutMs + 5000 > h.leaseUntilMs)
          await this.d.webhooks.store.releaseClaim(x.id, this.owner);
        else await this.attempt(x, free);
      } catch (e) {
        this.d.log.error({ err: e, delivery_id: x.id }, 'webhook attempt could not be recorded');
      } finally {
        free();
        bump(this.heldEp, x.endpoint_id, -1);
        bump(this.heldAcct, x.customer_id, -1);
        if (h.throttle) bump(this.throttled, x.customer_id, -1);
        this.pump();
        // Claim again once the held attempts run low (not after every send: a claim reads the whole due set).
        if (this.waiting.length <= this.sending) this.kick();
      }
    });
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
    await this.attempt(c);
  }

  /** Signs, sends and records one claimed attempt. */
  private async attempt(c: ClaimedDelivery, sent: () => void = () => undefined): Promise<void> {
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
    sent();
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
    // Claimed but unsent attempts go back to the outbox for another process.
    const waiting = this.waiting;
    this.waiting = [];
    for (const h of waiting) await this.d.webhooks.store.releaseClaim(h.c.id, this.owner).catch(() => undefined);
    await this.queue.onIdle();
  }
}

function bump(m: Map<string, number>, k: string, by: number): void {
  const n = (m.get(k) ?? 0) + by;
  if (n <= 0) m.delete(k);
  else m.set(k, n);
}
