// The payment processor adapter over the official Stripe SDK: Checkout
// Sessions for a subscription, and webhook events verified by the SDK
// (Stripe-Signature, HMAC-SHA256 with a timestamp tolerance) and reduced to
// the domain's BillingEvent. The API base can point at a Stripe-compatible
// server (CAPSULE_STRIPE_API_BASE) with its own trust anchor.
import { Agent } from 'node:https';
import Stripe from 'stripe';
import type { BillingEvent, CheckoutPort, CheckoutRequest, CheckoutSession, WebhookVerifier } from '../domain/index.js';
import { BillingSignatureError } from '../domain/index.js';

export interface StripeOptions {
  secretKey: string | null;
  webhookSecret: string | null;
  /** Where the SDK sends API calls instead of Stripe's own host; null = Stripe. */
  apiBase: URL | null;
  /** Extra trust anchor (PEM) for the API base, e.g. a local stand-in. */
  caPem: string | null;
}

/** Seconds a signed event stays acceptable (the SDK's default: 5 minutes). */
const TOLERANCE_S = 300;

const str = (v: unknown): string | null => (typeof v === 'string' && v !== '' ? v : null);
/** Stripe expands some fields into objects; the id either way. */
const idOf = (v: unknown): string | null =>
  str(v) ?? (v !== null && typeof v === 'object' ? str((v as { id?: unknown }).id) : null);

class StripeCheckout implements CheckoutPort {
  private readonly stripe: Stripe;
  constructor(secretKey: string, o: StripeOptions) {
    this.stripe = new Stripe(secretKey, {
      maxNetworkRetries: 2,
      timeout: 20_000,
      telemetry: false,
      ...(o.apiBase
        ? {
            host: o.apiBase.hostname,
            port: o.apiBase.port || (o.apiBase.protocol === 'http:' ? 80 : 443),
            protocol: o.apiBase.protocol === 'http:' ? 'http' : 'https',
          }
        : {}),
      ...(o.caPem ? { httpAgent: new Agent({ ca: o.caPem, keepAlive: true }) } : {}),
    });
  }

  async createCheckout(r: CheckoutRequest): Promise<CheckoutSession> {
    // The account id and tier ride on the session and its subscription: the
    // signed completion event carries them back.
    const metadata = { customer_id: r.customer_id, tier: r.tier };
    const s = await this.stripe.checkout.sessions.create(
      {
        mode: 'subscription',
        line_items: [{ price: r.price, quantity: 1 }],
        success_url: r.success_url,
        cancel_url: r.cancel_url,
        client_reference_id: r.customer_id,
        customer_email: r.email,
        metadata,
        subscription_data: { metadata },
      },
      r.idempotency_key === null ? undefined : { idempotencyKey: r.idempotency_key },
    );
    if (!s.url || typeof s.expires_at !== 'number') throw new Error('checkout session without url or expires_at');
    return { id: s.id, url: s.url, expires_at: s.expires_at };
  }
}

class StripeWebhooks implements WebhookVerifier {
  constructor(private readonly secret: string) {}

  verify(payload: Uint8Array, signature: string, nowMs: number): BillingEvent {
    let e: Stripe.Event;
    try {
      e = Stripe.webhooks.constructEvent(
        Buffer.from(payload),
        signature,
        this.secret,
        TOLERANCE_S,
        undefined,
        nowMs, // the SDK takes milliseconds here (it divides by 1000 itself)
      );
    } catch (err) {
      throw new BillingSignatureError(err instanceof Error ? err.message : String(err));
    }
    const obj = e.data.object as unknown as Record<string, unknown>;
    if (e.type === 'checkout.session.completed' || e.type === 'checkout.session.async_payment_succeeded') {
      const meta = (obj.metadata ?? {}) as Record<string, unknown>;
      const paid = obj.payment_status === 'paid' || obj.payment_status === 'no_payment_required';
      return {
        id: e.id,
        type: 'checkout_completed',
        customer_id: str(meta.customer_id) ?? str(obj.client_reference_id),
        tier: str(meta.tier),
        processor_customer: idOf(obj.customer),
        subscription: idOf(obj.subscription),
        paid,
      };
    }
    // Sent when the subscription ends: at the period end for a cancellation at period end.
    if (e.type === 'customer.subscription.deleted') {
      const sub = str(obj.id);
      if (sub) return { id: e.id, type: 'subscription_ended', subscription: sub };
    }
    return { id: e.id, type: 'other', name: e.type };
  }
}

/** The checkout and webhook halves; each is null while its secret is not configured. */
export function stripeBilling(o: StripeOptions): { checkout: CheckoutPort | null; webhooks: WebhookVerifier | null } {
  return {
    checkout: o.secretKey ? new StripeCheckout(o.secretKey, o) : null,
    webhooks: o.webhookSecret ? new StripeWebhooks(o.webhookSecret) : null,
  };
}
