// Egress profile and rule routes (SPEC "Egress profiles (Team tier and above)").
import Router from '@koa/router';
import type { EgressProfile, EgressRule } from '../../domain/index.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth, idempotent, json } from '../middleware.js';
import { paging } from '../paging.js';

const CURSOR_RE = /^[0-9TZ:.-]{20,40}\|eg[pr]_[0-9a-f]{1,64}$/;

const profileView = (p: EgressProfile): Record<string, unknown> => ({
  id: p.id,
  name: p.name,
  description: p.description,
  created_at: p.created_at,
});
const ruleView = (r: EgressRule): Record<string, unknown> => ({
  id: r.id,
  kind: r.kind,
  value: r.value,
  port: r.port,
  profile_id: r.profile_id,
  created_at: r.created_at,
});
const detailView = (p: EgressProfile, rules: EgressRule[]): Record<string, unknown> => ({
  ...profileView(p),
  rules: rules.map((r) => ({ id: r.id, kind: r.kind, value: r.value, port: r.port })),
});

const body = async (ctx: Ctx): Promise<Record<string, unknown>> => (await json(ctx)) as Record<string, unknown>;

export function egressRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services.egressProfiles;
  const a = auth(d);

  r.post('/v1/egress/profiles', a, idempotent(d), async (ctx: Ctx) => {
    const p = await s.create(caller(ctx), await body(ctx));
    ctx.status = 201;
    ctx.set('Location', `/v1/egress/profiles/${p.id}`);
    ctx.body = profileView(p);
  });

  r.get('/v1/egress/profiles', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, CURSOR_RE);
    const page = await s.list(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(profileView), next_cursor: page.next_cursor };
  });

  r.get('/v1/egress/profiles/:id', a, async (ctx: Ctx) => {
    const { profile, rules } = await s.detail(caller(ctx), ctx.params.id ?? '');
    ctx.body = detailView(profile, rules);
  });

  r.put('/v1/egress/profiles/:id', a, async (ctx: Ctx) => {
    const { profile, rules } = await s.update(caller(ctx), ctx.params.id ?? '', await body(ctx));
    ctx.body = detailView(profile, rules);
  });

  r.delete('/v1/egress/profiles/:id', a, async (ctx: Ctx) => {
    await s.delete(caller(ctx), ctx.params.id ?? '');
    ctx.status = 204;
  });

  r.post('/v1/egress/profiles/:id/rules', a, idempotent(d), async (ctx: Ctx) => {
    const rule = await s.addRule(caller(ctx), ctx.params.id ?? '', await body(ctx));
    ctx.status = 201;
    ctx.body = ruleView(rule);
  });

  r.get('/v1/egress/profiles/:id/rules', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, CURSOR_RE);
    const page = await s.rules(caller(ctx), ctx.params.id ?? '', limit, cursor);
    ctx.body = { items: page.items.map(ruleView), next_cursor: page.next_cursor };
  });

  r.delete('/v1/egress/profiles/:id/rules/:rid', a, async (ctx: Ctx) => {
    await s.deleteRule(caller(ctx), ctx.params.id ?? '', ctx.params.rid ?? '');
    ctx.status = 204;
  });

  // Flat endpoints: every rule of the account; additions go to the profile named "default".
  r.get('/v1/egress', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, CURSOR_RE);
    const page = await s.allRules(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(ruleView), next_cursor: page.next_cursor };
  });

  r.post('/v1/egress', a, idempotent(d), async (ctx: Ctx) => {
    const rule = await s.addDefaultRule(caller(ctx), await body(ctx));
    ctx.status = 201;
    ctx.body = ruleView(rule);
  });

  r.delete('/v1/egress/:id', a, async (ctx: Ctx) => {
    await s.deleteAnyRule(caller(ctx), ctx.params.id ?? '');
    ctx.status = 204;
  });

  return r;
}
