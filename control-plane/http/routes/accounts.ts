// API keys (/v1/api-keys) and TOTP MFA (/v1/mfa): authenticated; every write
// to keys and the removal of MFA pass the MFA gate.
import Router from '@koa/router';
import {
  createApiKeySchema,
  emptyBodySchema,
  mfaCodeSchema,
  parseBody,
  rotateApiKeySchema,
} from '../../domain/index.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { requireMfa } from '../mfa.js';
import { auth, json } from '../middleware.js';
import { paging } from '../paging.js';

const KEY_CURSOR_RE = /^[0-9TZ:.-]{20,40}\|key_[0-9a-f]{1,64}$/;

export function accountRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;
  const a = auth(d);
  const mfa = requireMfa(d);

  r.get('/v1/api-keys', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, KEY_CURSOR_RE);
    ctx.body = await s.keys.list(caller(ctx), limit, cursor);
  });

  r.post('/v1/api-keys', a, mfa, async (ctx: Ctx) => {
    const b = parseBody(createApiKeySchema, await json(ctx));
    ctx.status = 201;
    ctx.body = await s.keys.create(caller(ctx), b.mode ?? 'live');
  });

  r.delete('/v1/api-keys/:id', a, mfa, async (ctx: Ctx) => {
    ctx.body = await s.keys.revoke(caller(ctx), ctx.params.id ?? '');
  });

  r.post('/v1/api-keys/:id/rotate', a, mfa, async (ctx: Ctx) => {
    const b = parseBody(rotateApiKeySchema, await json(ctx));
    ctx.status = 201;
    ctx.body = await s.keys.rotate(caller(ctx), ctx.params.id ?? '', b.grace_seconds ?? 0);
  });

  r.get('/v1/mfa', a, async (ctx: Ctx) => {
    ctx.body = await s.mfa.status(caller(ctx));
  });

  r.post('/v1/mfa/enroll', a, async (ctx: Ctx) => {
    parseBody(emptyBodySchema, await json(ctx));
    ctx.status = 201;
    ctx.body = await s.mfa.enroll(caller(ctx));
  });

  r.post('/v1/mfa/activate', a, async (ctx: Ctx) => {
    const b = parseBody(mfaCodeSchema, await json(ctx));
    ctx.body = await s.mfa.activate(caller(ctx), b.code);
  });

  r.post('/v1/mfa/verify', a, async (ctx: Ctx) => {
    const b = parseBody(mfaCodeSchema, await json(ctx));
    ctx.body = await s.mfa.verify(caller(ctx), b.code);
  });

  r.delete('/v1/mfa', a, mfa, async (ctx: Ctx) => {
    await s.mfa.remove(caller(ctx));
    ctx.status = 204;
  });

  return r;
}
