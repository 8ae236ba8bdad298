// Per-request state shared by the middleware and routes, and the app's deps.
import type { Context, Next } from 'koa';
import type { Logger } from 'pino';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import type { HttpLimits } from '../config.js';
import type { Caller, Clock, Random, Store } from '../domain/index.js';
import type { Services } from '../service/index.js';
import type { RateLimiter } from './rate-limit.js';
import type { FairGate } from './fair-gate.js';
import type { HttpMetrics } from './metrics.js';

export interface HttpOptions {
  docsUrl: string;
  rateLimits: boolean;
  version: string;
  http: HttpLimits;
  /** CAPSULE_METRICS_TOKEN: the bearer token `GET /metrics` requires; null = open (scraped inside the cluster). */
  metricsToken: string | null;
}

export interface AppDeps {
  services: Services;
  store: Store;
  runner: RunnerPort;
  clock: Clock;
  random: Random;
  logger: Logger;
  options: HttpOptions;
  limiter: RateLimiter;
  /** Heavy tenants' turns at authenticated requests (fair-gate.ts). */
  gate: FairGate;
  metrics: HttpMetrics;
}

export interface State {
  requestId: string;
  http: HttpLimits;
  traceId: string | null;
  log: Logger;
  caller?: Caller;
  json?: unknown;
  /** The request's Idempotency-Key once claimed (create links its capsule to it). */
  idempotencyKey?: string;
  /** A retry that took over a dead process's claim: the capsule that request created. */
  idempotentResource?: string;
}

export type Ctx = Context & { state: State; params: Record<string, string> };
export type Mw = (ctx: Ctx, next: Next) => Promise<void>;

/** The authenticated caller; the auth middleware guarantees it on authenticated routes. */
export function caller(ctx: Ctx): Caller {
  const c = ctx.state.caller;
  if (!c) throw new Error('route mounted without auth');
  return c;
}
