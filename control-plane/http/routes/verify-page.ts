// GET /verify (the SPEC's {verify_url}) and its static assets: the browser
// verifier page. Public, limited per source IP like the error pages.
import Router from '@koa/router';
import { ApiError } from '../../../shared/errors.js';
import type { AppDeps, Ctx } from '../context.js';
import { ipLimit } from '../middleware.js';
import { collectVerifyAssets, VERIFY_ASSET_PREFIX, VERIFY_PAGE_CSP } from '../verify-assets.js';

/** Page loads per source IP and minute: a page pulls about 20 modules. */
const VERIFY_PAGE_PER_MINUTE = 1200;

export function verifyPageRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const assets = collectVerifyAssets();
  const limit = ipLimit(d, 'verify-page', VERIFY_PAGE_PER_MINUTE);
  const send = (ctx: Ctx, path: string): void => {
    const a = assets.get(path);
    if (!a) throw new ApiError('resource_not_found', 'no such verifier asset');
    ctx.set('Content-Security-Policy', VERIFY_PAGE_CSP);
    ctx.set('Cache-Control', 'no-cache');
    ctx.type = a.type;
    ctx.body = a.body;
  };
  r.get('/verify', limit, async (ctx: Ctx) => send(ctx, '/verify'));
  r.get('/verify/assets/*path', limit, async (ctx: Ctx) => send(ctx, VERIFY_ASSET_PREFIX + (ctx.params.path ?? '')));
  return r;
}
