// Webhook endpoints (create, read, list, update, delete, test, deliveries),
// the outbox events the other services emit, and the Enterprise admin
// surface (degradation modes, dead-letter queue, replay). docs/WEBHOOKS.md.
import { ApiError, invalid } from '../../shared/errors.js';
import {
  WEBHOOK_EVENT_TYPES,
  type Caller,
  type OutboxEvent,
  type WebhookDelivery,
  type WebhookEndpoint,
  type WebhookEventType,
  type WebhookPage,
} from '../domain/index.js';
import { isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { newId } from './ids.js';
import type { WebhookWorker } from './webhook-worker.js';

/** Bound on one account's endpoints (each event fans out to all of them). */
export const WEBHOOK_ENDPOINTS_MAX = 20;
export const WEBHOOK_URL_MAX = 2048;
export const WEBHOOK_DESCRIPTION_MAX = 500;
/** Dead letters re-queued by one replay call. */
export const REPLAY_MAX = 1000;
const ID_RE = /^whse_[0-9a-f]{24}$/;
const DELIVERY_ID_RE = /^whd_[0-9a-f]{24}$/;

/** Binds a sealed signing secret to its endpoint (SecretBox context). */
export const webhookSecretContext = (endpointId: string): string => `webhook:${endpointId}:signing_secret`;

/** A new outbox event: `{"id":"evt_…","type","created_at","data":{…}}` is its exact payload. */
export function newEvent(
  d: Deps,
  customerId: string,
  type: WebhookEventType,
  data: Record<string, unknown>,
): OutboxEvent {
  const id = newId('evt_', d.random);
  const created_at = d.clock.nowIso();
  return { id, customer_id: customerId, type, created_at, payload: JSON.stringify({ id, type, created_at, data }) };
}

/** The public verify link of a capsule's proof. */
export const verifyUrl = (d: Deps, capsuleId: string): string =>
  `${d.webhooks.baseUrl.value}/v1/capsules/${capsuleId}/cdp/verify`;

const notFound = (): ApiError => new ApiError('resource_not_found', 'webhook endpoint not found');

function onlyKeys(body: Record<string, unknown>, keys: readonly string[]): void {
  for (const k of Object.keys(body)) if (!keys.includes(k)) throw invalid(k, 'unknown field');
}

export class WebhookService {
  private worker: WebhookWorker | null = null;
  constructor(private readonly d: Deps) {}

  /** The delivery worker the test endpoint delivers through (set by buildServices). */
  attach(worker: WebhookWorker): void {
    this.worker = worker;
  }

  private parseUrl(v: unknown): string {
    if (typeof v !== 'string') throw invalid('url', 'must be a string');
    if (v.length > WEBHOOK_URL_MAX) throw invalid('url', `at most ${WEBHOOK_URL_MAX} characters`);
    let u: URL;
    try {
      u = new URL(v);
    } catch {
      throw invalid('url', 'not an absolute URL');
    }
    const allowPrivate = this.d.webhooks.allowPrivate;
    if (u.protocol !== 'https:' && !(u.protocol === 'http:' && allowPrivate))
      throw invalid(
        'url',
        allowPrivate
          ? 'must be an https or http URL'
          : 'must be an https URL (plain http only on development installs)',
      );
    if (u.username || u.password) throw invalid('url', 'must not carry credentials');
    if (u.hash) throw invalid('url', 'must not carry a fragment');
    const refusal = this.d.webhooks.sender.refusal(u.href);
    if (refusal) throw invalid('url', refusal);
    return u.href;
  }

  private parseEvents(v: unknown): WebhookEventType[] {
    if (!Array.isArray(v)) throw invalid('events', 'must be an array of event names');
    if (v.length === 0) throw invalid('events', `must not be empty (one or more of ${WEBHOOK_EVENT_TYPES.join(', ')})`);
    if (v.length > WEBHOOK_EVENT_TYPES.length * 2) throw invalid('events', 'too many entries');
    const out: WebhookEventType[] = [];
    v.forEach((e, i) => {
      if (typeof e !== 'string' || !(WEBHOOK_EVENT_TYPES as readonly string[]).includes(e))
        throw invalid(`events[${i}]`, `unknown event; one of ${WEBHOOK_EVENT_TYPES.join(', ')}`);
      if (!out.includes(e as WebhookEventType)) out.push(e as WebhookEventType);
    });
    return out;
  }

  private parseDescription(v: unknown): string {
    if (typeof v !== 'string') throw invalid('description', 'must be a string');
    if ([...v].length > WEBHOOK_DESCRIPTION_MAX)
      throw invalid('description', `at most ${WEBHOOK_DESCRIPTION_MAX} characters`);
    // eslint-disable-next-line no-control-regex -- control characters are exactly what is refused
    if (/[\u0000-\u0008\u000b-\u001f\u007f]/.test(v))
      throw invalid('description', 'must not contain control characters');
    return v;
  }

  /** Creates an endpoint; the signing secret is returned here only. */
  async create(
    caller: Caller,
    body: Record<string, unknown>,
  ): Promise<{ endpoint: WebhookEndpoint; signing_secret: string }> {
    onlyKeys(body, ['url', 'events', 'description']);
    if (body.url === undefined) throw invalid('url', 'is required');
    const url = this.parseUrl(body.url);
    if (body.events === undefined) throw invalid('events', 'is required');
    const events = this.parseEvents(body.events);
    const description = body.description === undefined ? '' : this.parseDescription(body.description);
    const id = newId('whse_', this.d.random);
    const secret = `whsec_${Buffer.from(this.d.random(32)).toString('hex')}`;
    const now = this.d.clock.nowIso();
    const endpoint: WebhookEndpoint = {
      id,
      customer_id: caller.account.customer_id,
      url,
      events,
      description,
      active: true,
      secret_sealed: this.d.secrets.sealString(secret, webhookSecretContext(id)),
      created_at: now,
      updated_at: now,
    };
    if ((await this.d.webhooks.store.insertEndpoint(endpoint, WEBHOOK_ENDPOINTS_MAX)) === 'limit')
      throw new ApiError('quota_exceeded', `an account holds at most ${WEBHOOK_ENDPOINTS_MAX} webhook endpoints`, {
        extra: { limit: 'webhook_endpoints' },
      });
    this.d.log.info({ customer_id: endpoint.customer_id, webhook_id: id }, 'webhook endpoint created');
    return { endpoint, signing_secret: secret };
  }

  /** An endpoint the caller owns; anything else is 404. */
  async owned(caller: Caller, id: string): Promise<WebhookEndpoint> {
    const e = ID_RE.test(id) ? await this.d.webhooks.store.getEndpoint(id) : null;
    if (!e || e.customer_id !== caller.account.customer_id) throw notFound();
    return e;
  }

  list(caller: Caller, limit: number, cursor: string | null): Promise<WebhookPage<WebhookEndpoint>> {
    return this.d.webhooks.store.listEndpoints(caller.account.customer_id, limit, cursor);
  }

  async update(caller: Caller, id: string, body: Record<string, unknown>): Promise<WebhookEndpoint> {
    const e = await this.owned(caller, id);
    onlyKeys(body, ['url', 'events', 'description', 'active']);
    const set: Parameters<Deps['webhooks']['store']['updateEndpoint']>[1] = {};
    if (body.url !== undefined) set.url = this.parseUrl(body.url);
    if (body.events !== undefined) set.events = this.parseEvents(body.events);
    if (body.description !== undefined) set.description = this.parseDescription(body.description);
    if (body.active !== undefined) {
      if (typeof body.active !== 'boolean') throw invalid('active', 'must be true or false');
      set.active = body.active;
    }
    set.updated_at = this.d.clock.nowIso();
    const out = await this.d.webhooks.store.updateEndpoint(e.id, set);
    if (!out) throw notFound();
    return out;
  }

  async delete(caller: Caller, id: string): Promise<void> {
    const e = await this.owned(caller, id);
    if (!(await this.d.webhooks.store.deleteEndpoint(e.id))) throw notFound();
  }

  /** Sends a webhook.test event to the endpoint now and returns the attempt's record (retries follow the schedule). */
  async test(caller: Caller, id: string): Promise<WebhookDelivery> {
    const e = await this.owned(caller, id);
    const ev = newEvent(this.d, e.customer_id, 'webhook.test', {
      webhook_id: e.id,
      message: 'a test event sent with POST /v1/webhooks/:id/test',
    });
    // Inserted already leased to this process: the background worker cannot take it first.
    const deliveryId = await this.d.webhooks.store.insertDirectEvent(ev, e.id, this.worker?.leaseNow());
    if (this.worker) await this.worker.deliverNow(deliveryId);
    else this.d.webhooks.kick?.();
    const rec = await this.d.webhooks.store.getDelivery(deliveryId);
    if (!rec) throw notFound();
    return rec;
  }

  async deliveries(
    caller: Caller,
    id: string,
    limit: number,
    cursor: string | null,
  ): Promise<WebhookPage<WebhookDelivery>> {
    const e = await this.owned(caller, id);
    return this.d.webhooks.store.listDeliveries(e.id, limit, cursor);
  }

  // ---- Enterprise admin (/v1/admin/*)

  requireEnterprise(caller: Caller): void {
    if (caller.account.tier !== 'enterprise')
      throw new ApiError('tier_required', 'the admin endpoints need the Enterprise tier');
  }

  /** Active degradation modes (SPEC closed set) that concern the account, with when each began. */
  async degradation(caller: Caller): Promise<{ mode: string; since: string }[]> {
    const since = await this.d.webhooks.store.replayInProgressSince(caller.account.customer_id);
    return since ? [{ mode: 'dlq_replay_in_progress', since }] : [];
  }

  deadLetters(caller: Caller, limit: number, cursor: string | null): Promise<WebhookPage<WebhookDelivery>> {
    return this.d.webhooks.store.listDeadLetters(caller.account.customer_id, limit, cursor);
  }

  /** Re-queues dead letters (all, or the listed ones) for one more attempt each; how many. */
  async replay(caller: Caller, body: Record<string, unknown>): Promise<number> {
    onlyKeys(body, ['delivery_ids']);
    let ids: string[] | null = null;
    if (body.delivery_ids !== undefined) {
      const v = body.delivery_ids;
      if (!Array.isArray(v) || v.length === 0)
        throw invalid('delivery_ids', 'must be a non-empty array of delivery ids');
      if (v.length > REPLAY_MAX) throw invalid('delivery_ids', `at most ${REPLAY_MAX} ids`);
      v.forEach((x, i) => {
        if (typeof x !== 'string' || !DELIVERY_ID_RE.test(x)) throw invalid(`delivery_ids[${i}]`, 'not a delivery id');
      });
      ids = [...new Set(v as string[])];
    }
    const n = await this.d.webhooks.store.replayDeadLetters(
      caller.account.customer_id,
      ids,
      isoMicros(this.d.clock.nowMs()),
      REPLAY_MAX,
    );
    this.d.log.info({ customer_id: caller.account.customer_id, replayed: n }, 'dead letters replayed');
    this.d.webhooks.kick?.();
    return n;
  }
}
