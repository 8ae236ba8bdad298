// Self-service billing: a checkout session for a paid tier at the payment
// processor, and the processor's signed events that change the tier (a paid
// checkout) or end it (subscription ended -> free). The tier is a column read
// on every request, so the change reaches limits and rate limits at once.
import { ApiError, invalid } from '../../shared/errors.js';
import type { Caller, PurchasableTier, TierChange } from '../domain/index.js';
import { BillingSignatureError, normalizeTier } from '../domain/index.js';
import { isoMicros } from './clock.js';
import type { Deps } from './deps.js';

const PRICE_SETTING: Record<PurchasableTier, string> = {
  starter: 'CAPSULE_STRIPE_PRICE_STARTER',
  business: 'CAPSULE_STRIPE_PRICE_BUSINESS',
};

const notConfigured = (setting: string): ApiError =>
  new ApiError('service_unavailable', `billing is not configured on this install: ${setting} is not set`);

/** The purchasable tier named by `name` (wire or external name); 400 naming `tier` otherwise. */
export function purchasableTier(name: string): PurchasableTier {
  const t = normalizeTier(name);
  if (t === 'starter' || t === 'business') return t;
  if (t === 'enterprise')
    throw invalid('tier', 'Enterprise contracts are not self-service: contact sales through POST /v1/contact');
  if (t === 'free') throw invalid('tier', 'free is not purchased: cancel the subscription to return to it');
  throw invalid('tier', 'must be one of developer, team, starter, business');
}

export class BillingService {
  constructor(private readonly d: Deps) {}

  async checkout(caller: Caller, tierName: string, idempotencyKey: string | null): Promise<Record<string, unknown>> {
    const tier = purchasableTier(tierName);
    const b = this.d.billing;
    if (!b.checkout) throw notConfigured('CAPSULE_STRIPE_SECRET_KEY');
    const price = b.prices[tier];
    if (!price) throw notConfigured(PRICE_SETTING[tier]);
    const a = caller.account;
    if (a.tier === tier) throw new ApiError('resource_conflict', `tier: the account is already on ${tier}`);
    let session;
    try {
      session = await b.checkout.createCheckout({
        customer_id: a.customer_id,
        email: a.email,
        tier,
        price,
        success_url: b.successUrl,
        cancel_url: b.cancelUrl,
        idempotency_key: idempotencyKey === null ? null : `${a.customer_id}:${idempotencyKey}`,
      });
    } catch (e) {
      throw new ApiError('service_unavailable', 'the payment processor did not answer: try again', { cause: e });
    }
    this.d.log.info({ customer_id: a.customer_id, tier, checkout_session_id: session.id }, 'checkout created');
    return {
      checkout_url: session.url,
      checkout_session_id: session.id,
      tier,
      expires_at: isoMicros(session.expires_at * 1000),
    };
  }

  /** A processor event: verified, recorded once by id, applied in the same transaction. */
  async webhook(payload: Uint8Array, signature: string): Promise<Record<string, unknown>> {
    const verifier = this.d.billing.webhooks;
    if (!verifier) throw notConfigured('CAPSULE_STRIPE_WEBHOOK_SECRET');
    if (!signature) throw invalid('Stripe-Signature', 'header is required');
    let event;
    try {
      event = verifier.verify(payload, signature, this.d.clock.nowMs());
    } catch (e) {
      if (e instanceof BillingSignatureError)
        throw new ApiError('invalid_parameters', 'Stripe-Signature: does not verify', {
          cause: e,
          extra: { field: 'Stripe-Signature' },
        });
      throw e;
    }
    let change: TierChange | null = null;
    if (event.type === 'checkout_completed') {
      const tier = event.tier === null ? null : normalizeTier(event.tier);
      // Only a paid session of a tier we sell changes a tier; an unpaid one waits for its async payment event.
      if (event.paid && event.customer_id && (tier === 'starter' || tier === 'business'))
        change = {
          kind: 'subscribed',
          customer_id: event.customer_id,
          tier,
          processor_customer: event.processor_customer,
          subscription: event.subscription,
        };
    } else if (event.type === 'subscription_ended') change = { kind: 'ended', subscription: event.subscription };
    const type = event.type === 'other' ? event.name : event.type;
    const outcome = await this.d.billingStore.applyBillingEvent(
      { id: event.id, type, received_at: this.d.clock.nowIso() },
      change,
    );
    this.d.log.info(
      {
        event_id: event.id,
        event_type: type,
        outcome,
        ...(change?.kind === 'subscribed' ? { customer_id: change.customer_id, tier: change.tier } : {}),
      },
      'billing event',
    );
    return { received: true };
  }
}
