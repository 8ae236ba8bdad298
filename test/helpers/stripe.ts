// A local stand-in for the Stripe API endpoints Capsule calls (POST
// /v1/checkout/sessions), over HTTPS with a test CA, speaking Stripe's wire
// format: form-encoded bearer-authenticated requests, JSON objects back,
// Idempotency-Key replays. The real `stripe` SDK is pointed at it through
// CAPSULE_STRIPE_API_BASE and trusts it through CAPSULE_STRIPE_CA_FILE.
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { makePki } from '../egress/fixtures.js';

export interface SeenRequest {
  method: string;
  path: string;
  authorization: string | undefined;
  idempotencyKey: string | undefined;
  /** Decoded form fields, flat (`line_items[0][price]`). */
  form: Record<string, string>;
}

export interface StripeStandIn {
  /** https://127.0.0.1:<port> */
  base: string;
  /** Path of the PEM trust anchor for the stand-in's certificate. */
  caFile: string;
  seen: SeenRequest[];
  /** Answer the next checkout creations with this HTTP status (Stripe's error form). */
  failNext(status: number, times?: number): void;
  close(): Promise<void>;
}

export async function startStripeStandIn(dir: string, secretKey: string): Promise<StripeStandIn> {
  const pki = makePki(['127.0.0.1', 'localhost']);
  const caFile = join(dir, 'stripe-ca.pem');
  writeFileSync(caFile, pki.caPem);
  const seen: SeenRequest[] = [];
  const replies = new Map<string, { status: number; body: string }>();
  let failures: { status: number; left: number } | null = null;
  const server: Server = createServer({ key: pki.serverKey, cert: pki.serverCert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const form = Object.fromEntries(new URLSearchParams(Buffer.concat(chunks).toString('utf8')));
      const idem = req.headers['idempotency-key'] as string | undefined;
      const entry: SeenRequest = {
        method: req.method ?? '',
        path: (req.url ?? '').split('?')[0] ?? '',
        authorization: req.headers.authorization,
        idempotencyKey: idem,
        form,
      };
      seen.push(entry);
      const send = (status: number, body: unknown): void => {
        const text = JSON.stringify(body);
        if (idem && status < 500) replies.set(idem, { status, body: text });
        res.writeHead(status, {
          'content-type': 'application/json',
          'request-id': `req_${randomBytes(6).toString('hex')}`,
        });
        res.end(text);
      };
      if (req.headers.authorization !== `Bearer ${secretKey}`)
        return send(401, { error: { type: 'invalid_request_error', message: 'Invalid API Key provided' } });
      if (entry.method === 'POST' && entry.path === '/v1/checkout/sessions') {
        const prior = idem ? replies.get(idem) : undefined;
        if (prior) {
          res.writeHead(prior.status, { 'content-type': 'application/json', 'idempotent-replayed': 'true' });
          return res.end(prior.body);
        }
        if (failures && failures.left > 0) {
          failures.left--;
          return send(failures.status, { error: { type: 'api_error', message: 'stand-in failure' } });
        }
        if (!form['line_items[0][price]'] || !form.success_url || form.mode !== 'subscription')
          return send(400, { error: { type: 'invalid_request_error', message: 'missing parameter' } });
        const id = `cs_test_${randomBytes(12).toString('hex')}`;
        const created = Math.floor(Date.now() / 1000);
        return send(200, {
          id,
          object: 'checkout.session',
          mode: 'subscription',
          created,
          // Stripe's default: a session expires 24 hours after creation.
          expires_at: created + 86400,
          url: `https://checkout.stripe.com/c/pay/${id}`,
          client_reference_id: form.client_reference_id ?? null,
          customer_email: form.customer_email ?? null,
          metadata: { customer_id: form['metadata[customer_id]'], tier: form['metadata[tier]'] },
          payment_status: 'unpaid',
          status: 'open',
        });
      }
      return send(404, {
        error: { type: 'invalid_request_error', message: `Unrecognized request URL (${entry.path})` },
      });
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    base: `https://127.0.0.1:${port}`,
    caFile,
    seen,
    failNext(status, times = 1) {
      failures = { status, left: times };
    },
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** A checkout.session.completed event as Stripe sends it for a paid subscription checkout. */
export function checkoutCompletedEvent(o: {
  id?: string;
  customerId: string;
  tier: string;
  sessionId?: string;
  subscription?: string;
  paymentStatus?: string;
}): Record<string, unknown> {
  return {
    id: o.id ?? `evt_${randomBytes(12).toString('hex')}`,
    object: 'event',
    api_version: '2025-01-01',
    created: Math.floor(Date.now() / 1000),
    type: 'checkout.session.completed',
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    data: {
      object: {
        id: o.sessionId ?? `cs_test_${randomBytes(8).toString('hex')}`,
        object: 'checkout.session',
        mode: 'subscription',
        client_reference_id: o.customerId,
        customer: `cus_stripe_${randomBytes(6).toString('hex')}`,
        subscription: o.subscription ?? `sub_${randomBytes(8).toString('hex')}`,
        metadata: { customer_id: o.customerId, tier: o.tier },
        payment_status: o.paymentStatus ?? 'paid',
        status: 'complete',
      },
    },
  };
}

/** customer.subscription.deleted, sent by Stripe when a subscription ends (at period end for a cancellation then). */
export function subscriptionDeletedEvent(subscription: string, id?: string): Record<string, unknown> {
  return {
    id: id ?? `evt_${randomBytes(12).toString('hex')}`,
    object: 'event',
    api_version: '2025-01-01',
    created: Math.floor(Date.now() / 1000),
    type: 'customer.subscription.deleted',
    livemode: false,
    pending_webhooks: 1,
    request: { id: null, idempotency_key: null },
    data: {
      object: { id: subscription, object: 'subscription', status: 'canceled', cancel_at_period_end: true },
    },
  };
}
