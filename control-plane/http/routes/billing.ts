// Billing: checkout (authenticated, Idempotency-Key honoured) and the payment
// processor's webhook receiver (public, signature-verified on the raw bytes).
import Router from '@koa/router';
import { checkoutSchema, parseBody } from '../../domain/index.js';
import { readRaw } from '../body.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth, idempotent, ipLimit, json } from '../middleware.js';

/** Processor events are small; this bounds what an unauthenticated sender can make us hash. */
const WEBHOOK_BODY_LIMIT = 1024 * 1024;
/** Per source IP and minute: far above a processor's delivery rate, far below a flood. */
const WEBHOOK_PER_MINUTE = 600;

export function billingRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;

  r.post('/v1/billing/checkout', auth(d), idempotent(d), async (ctx: Ctx) => {
    const b = parseBody(checkoutSchema, await json(ctx));
    ctx.body = await s.billing.checkout(caller(ctx), b.tier, ctx.get('idempotency-key') || null);
  });

  r.post('/v1/billing/webhook', ipLimit(d, 'billing-webhook', WEBHOOK_PER_MINUTE), async (ctx: Ctx) => {
    const payload = await readRaw(ctx, { limit: WEBHOOK_BODY_LIMIT, idleTimeoutMs: ctx.state.http.bodyIdleTimeoutMs });
    ctx.body = await s.billing.webhook(payload, ctx.get('stripe-signature'));
  });

  return r;
}
