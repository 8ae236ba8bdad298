// Webhook endpoints (SPEC "Webhooks") and the Enterprise admin surface
// (/v1/admin/*). Owner-only (404 otherwise); writes and every admin route
// pass the MFA gate; admin routes need the Enterprise tier (403 tier_required).
// The signing secret appears in the create response only.
import Router from '@koa/router';
import type { WebhookDelivery, WebhookEndpoint } from '../../domain/index.js';
import { caller, type AppDeps, type Ctx, type Mw } from '../context.js';
import { requireMfa } from '../mfa.js';
import { auth, json } from '../middleware.js';
import { paging } from '../paging.js';

const ENDPOINT_CURSOR_RE = /^[0-9TZ:.-]{20,40}\|whse_[0-9a-f]{24}$/;
const DELIVERY_CURSOR_RE = /^[0-9TZ:.-]{20,40}\|whd_[0-9a-f]{24}$/;

export const endpointView = (e: WebhookEndpoint): Record<string, unknown> => ({
  id: e.id,
  url: e.url,
  events: e.events,
  description: e.description,
  active: e.active,
  created_at: e.created_at,
});

export const deliveryView = (x: WebhookDelivery): Record<string, unknown> => ({
  id: x.id,
  webhook_id: x.endpoint_id,
  event_id: x.event_id,
  event_type: x.event_type,
  attempt_number: x.attempt_number,
  status: x.status,
  response_status: x.response_status,
  response_body: x.response_body,
  duration_ms: x.duration_ms,
  error: x.error,
  next_attempt_at: x.next_attempt_at,
  attempted_at: x.attempted_at,
  created_at: x.created_at,
  replay: x.replay,
});

const body = async (ctx: Ctx): Promise<Record<string, unknown>> => (await json(ctx)) as Record<string, unknown>;

export function webhookRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services.webhooks;
  const a = auth(d);
  const mfa = requireMfa(d);
  const enterprise: Mw = async (ctx, next) => {
    s.requireEnterprise(caller(ctx));
    await next();
  };

  // No Idempotency-Key replay here: the stored response would keep the signing secret in the clear for 24 h.
  r.post('/v1/webhooks', a, mfa, async (ctx: Ctx) => {
    const { endpoint, signing_secret } = await s.create(caller(ctx), await body(ctx));
    ctx.status = 201;
    ctx.set('Location', `/v1/webhooks/${endpoint.id}`);
    ctx.set('Cache-Control', 'no-store');
    ctx.body = { ...endpointView(endpoint), signing_secret };
  });

  r.get('/v1/webhooks', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, ENDPOINT_CURSOR_RE);
    const page = await s.list(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(endpointView), next_cursor: page.next_cursor };
  });

  r.get('/v1/webhooks/:id', a, async (ctx: Ctx) => {
    ctx.body = endpointView(await s.owned(caller(ctx), ctx.params.id ?? ''));
  });

  r.put('/v1/webhooks/:id', a, mfa, async (ctx: Ctx) => {
    ctx.body = endpointView(await s.update(caller(ctx), ctx.params.id ?? '', await body(ctx)));
  });

  r.delete('/v1/webhooks/:id', a, mfa, async (ctx: Ctx) => {
    await s.delete(caller(ctx), ctx.params.id ?? '');
    ctx.status = 204;
  });

  r.post('/v1/webhooks/:id/test', a, mfa, async (ctx: Ctx) => {
    ctx.body = deliveryView(await s.test(caller(ctx), ctx.params.id ?? ''));
  });

  r.get('/v1/webhooks/:id/deliveries', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, DELIVERY_CURSOR_RE);
    const page = await s.deliveries(caller(ctx), ctx.params.id ?? '', limit, cursor);
    ctx.body = { items: page.items.map(deliveryView), next_cursor: page.next_cursor };
  });

  // ---- Enterprise admin
  r.get('/v1/admin/degradation', a, enterprise, mfa, async (ctx: Ctx) => {
    ctx.body = { modes: await s.degradation(caller(ctx)) };
  });

  r.get('/v1/admin/dlq', a, enterprise, mfa, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, DELIVERY_CURSOR_RE);
    const page = await s.deadLetters(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(deliveryView), next_cursor: page.next_cursor };
  });

  r.post('/v1/admin/dlq/replay', a, enterprise, mfa, async (ctx: Ctx) => {
    const n = await s.replay(caller(ctx), await body(ctx));
    ctx.status = 202;
    ctx.body = { replayed: n };
  });

  return r;
}
