// Assembles the Koa application: request context first, then the routers.
import type Router from '@koa/router';
import Koa from 'koa';
import type { AppDeps } from './context.js';
import { requestContext } from './middleware.js';
import { accountRoutes } from './routes/accounts.js';
import { billingRoutes } from './routes/billing.js';
import { usageRoutes } from './routes/usage.js';
import { capsuleRoutes } from './routes/capsules.js';
import { capsulefileRoutes } from './routes/capsulefiles.js';
import { egressRoutes } from './routes/egress.js';
import { publicRoutes } from './routes/public.js';
import { sessionRoutes } from './routes/sessions.js';
import { webhookRoutes } from './routes/webhooks.js';
import { verifyPageRoutes } from './routes/verify-page.js';

export type { AppDeps, HttpOptions } from './context.js';
export { ERROR_TABLE, renderError } from './errors.js';
export { RateLimiter } from './rate-limit.js';
export { FairGate } from './fair-gate.js';
export { createMetrics, type HttpMetrics } from './metrics.js';
export { capConnectionsPerSource, type ConnectionGuard } from './connections.js';
export { requireMfa } from './mfa.js';

export interface ServedRoute {
  method: string;
  path: string;
}

/** The method and path of every route the app's routers carry (HEAD excluded: Koa answers it from GET). */
export function servedRoutes(app: Koa): ServedRoute[] {
  const out: ServedRoute[] = [];
  for (const mw of app.middleware) {
    const router = (mw as { router?: Router }).router;
    for (const layer of router?.stack ?? [])
      for (const m of layer.methods) if (m !== 'HEAD') out.push({ method: m.toLowerCase(), path: String(layer.path) });
  }
  return out;
}

export function createApp(d: AppDeps): Koa {
  const app = new Koa({ proxy: false });
  app.silent = true; // errors are rendered and logged by requestContext
  app.use(requestContext(d) as Koa.Middleware);
  for (const r of [
    publicRoutes(d),
    capsuleRoutes(d),
    capsulefileRoutes(d),
    sessionRoutes(d),
    egressRoutes(d),
    accountRoutes(d),
    usageRoutes(d),
    billingRoutes(d),
    webhookRoutes(d),
    verifyPageRoutes(d),
  ]) {
    app.use(r.routes() as unknown as Koa.Middleware);
  }
  return app;
}
