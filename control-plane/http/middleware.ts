// Cross-cutting middleware: request id and trace id, error envelope, access
// log, auth, rate limits (per IP and per customer), idempotent replay.
import { createHash } from 'node:crypto';
import { ApiError, invalid } from '../../shared/errors.js';
import { newId } from '../service/index.js';
import { readJson } from './body.js';
import { requestTrace } from '../../shared/node/trace.js';
import type { AppDeps, Ctx, Mw } from './context.js';
import { renderError } from './errors.js';

/** JSON bodies: exec's input_data (512 KB) plus command (10 KB) plus headroom. */
export const JSON_BODY_LIMIT = 600 * 1024;
export const IDEMPOTENCY_WINDOW_MS = 24 * 3600 * 1000;
/** A claimed key is renewed this often while its request runs; unrenewed this long, its process is taken for dead. */
const IDEMPOTENCY_RENEW_MS = 2000;
const IDEMPOTENCY_STALE_MS = 6000;
const TRACE_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** Every API response: no MIME sniffing, nothing rendered or framed from this origin (docs/SECURITY.md). */
export const API_CSP = "default-src 'none'; frame-ancestors 'none'";

/** Reads (once) and caches the JSON body. */
export async function json(ctx: Ctx): Promise<unknown> {
  if (ctx.state.json === undefined)
    ctx.state.json = await readJson(ctx, { limit: JSON_BODY_LIMIT, idleTimeoutMs: ctx.state.http.bodyIdleTimeoutMs });
  return ctx.state.json;
}

export function requestContext(d: AppDeps): Mw {
  return async (ctx, next) => {
    const started = process.hrtime.bigint();
    ctx.state.requestId = newId('req_', d.random);
    ctx.state.http = d.options.http;
    const trace = ctx.get('x-svc-trace-id');
    ctx.state.traceId = TRACE_RE.test(trace) ? trace : null;
    ctx.state.log = d.logger.child({
      request_id: ctx.state.requestId,
      ...(ctx.state.traceId ? { trace_id: ctx.state.traceId } : {}),
    });
    ctx.set('X-Svc-Request-Id', ctx.state.requestId);
    ctx.set('X-Content-Type-Options', 'nosniff');
    ctx.set('Content-Security-Policy', API_CSP);
    if (ctx.state.traceId) ctx.set('X-Svc-Trace-Id', ctx.state.traceId);
    try {
      // Runner calls made for this request carry its ids (forwarded in each frame, logged by the runner).
      await requestTrace.run({ request_id: ctx.state.requestId, trace_id: ctx.state.traceId }, next);
      if (ctx.status === 404 && ctx.body === undefined)
        throw new ApiError('resource_not_found', `no such endpoint: ${ctx.method} ${ctx.path}`);
    } catch (err) {
      const r = renderError(err, ctx.state.requestId, d.options.docsUrl);
      // Stored replays carry their own request id; keep body and header equal.
      const replayId = ctx.response.get('X-Svc-Request-Id');
      if (replayId) r.body.error.request_id = replayId;
      ctx.status = r.status;
      ctx.body = r.body;
      if (r.retryAfter !== null) ctx.set('Retry-After', String(r.retryAfter));
      if (r.status >= 500)
        ctx.state.log.error(
          { err: err instanceof ApiError && err.cause !== undefined ? err.cause : err, code: r.body.error.code },
          'request failed',
        );
    } finally {
      const ms = Number(process.hrtime.bigint() - started) / 1e6;
      const route = (ctx as { _matchedRoute?: string })._matchedRoute ?? null;
      d.metrics.observe(ctx.method, route, ctx.status, ms / 1000);
      ctx.state.log.info(
        {
          method: ctx.method,
          route,
          status: ctx.status,
          ms: Math.round(ms * 10) / 10,
        },
        'request',
      );
    }
  };
}

export function ipLimit(d: AppDeps, name: string, perMinute: number): Mw {
  return async (ctx, next) => {
    if (d.options.rateLimits) {
      const wait = d.limiter.hit(`ip:${name}:${ctx.ip}`, perMinute);
      if (wait > 0)
        throw new ApiError('rate_limited', `rate limit: ${perMinute} requests per minute per source IP`, {
          extra: { retry_after: wait },
        });
    }
    await next();
  };
}

/** Bearer key auth, then the customer's rate_limit_rpm. */
export function auth(d: AppDeps): Mw {
  return async (ctx, next) => {
    const h = ctx.get('authorization');
    const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
    if (!h) throw new ApiError('invalid_api_key', 'missing API key: send Authorization: Bearer <API_KEY>');
    const c = m ? await d.services.accounts.authenticate(m[1]) : null;
    if (!c) throw new ApiError('invalid_api_key', 'API key is malformed, unknown or revoked');
    ctx.state.caller = c;
    if (d.options.rateLimits) {
      const rpm = d.services.accounts.limits(c.account).rate_limit_rpm;
      const wait = await d.limiter.hitAccount(`cus:${c.account.customer_id}`, rpm);
      if (wait > 0)
        throw new ApiError('rate_limited', `rate limit: ${rpm} requests per minute for this account`, {
          extra: { retry_after: wait },
        });
    }
    // The turn lasts until the answer is written (a long answer is written after the routes return).
    const release = await d.gate.enter(c.account.customer_id);
    // A client that went away while its request waited: 'close' has been and gone.
    if (ctx.res.closed) release();
    else ctx.res.once('close', release);
    await next();
  };
}

const REPLAY_HEADERS = ['content-type', 'x-svc-request-id', 'location'];

/**
 * Idempotency-Key: the first request's status, body and headers are stored
 * and replayed for 24 h; a concurrent duplicate waits for the first to finish.
 */
export function idempotent(d: AppDeps): Mw {
  return async (ctx, next) => {
    const key = ctx.get('idempotency-key');
    if (!key) return next();
    if (key.length > 255 || !/^[\x21-\x7e]+$/.test(key))
      throw invalid('Idempotency-Key', 'at most 255 visible ASCII characters');
    const c = ctx.state.caller;
    if (!c) throw new Error('idempotent() mounted before auth');
    const body = await json(ctx);
    const hash = createHash('sha256')
      .update(`${ctx.method} ${ctx.path}\n${JSON.stringify(body)}`)
      .digest('hex');
    const customer = c.account.customer_id;
    const deadline = Date.now() + 10_000;
    for (;;) {
      const now = d.clock.nowMs();
      const claim = await d.store.claimIdempotency(
        customer,
        key,
        hash,
        new Date(now).toISOString(),
        new Date(now - IDEMPOTENCY_WINDOW_MS).toISOString(),
        new Date(now - IDEMPOTENCY_STALE_MS).toISOString(),
      );
      if (claim.state === 'claimed') {
        // Taken over from a process that died mid-request: same request only; its capsule, if it made one.
        if (claim.request_hash !== undefined && claim.request_hash !== hash)
          throw invalid('Idempotency-Key', 'already used with a different request');
        if (claim.resource_id) ctx.state.idempotentResource = claim.resource_id;
        break;
      }
      if (claim.state === 'done') {
        if (claim.request_hash !== hash) throw invalid('Idempotency-Key', 'already used with a different request');
        ctx.status = claim.response.status;
        for (const [k, v] of Object.entries(claim.response.headers)) ctx.set(k, v);
        ctx.set('Idempotent-Replayed', 'true');
        ctx.body = claim.response.body;
        return;
      }
      if (Date.now() > deadline)
        throw new ApiError('resource_conflict', 'a request with this Idempotency-Key is still in progress');
      await new Promise((r) => setTimeout(r, 50));
    }
    const store = async (status: number, bodyText: string): Promise<void> => {
      const headers: Record<string, string> = {};
      for (const h of REPLAY_HEADERS) {
        const v = ctx.response.get(h);
        if (v) headers[h] = String(v);
      }
      await d.store.completeIdempotency(customer, key, { status, body: bodyText, headers });
    };
    ctx.state.idempotencyKey = key;
    const renew = setInterval(() => {
      void d.store
        .renewIdempotency(customer, key, d.clock.nowIso())
        .catch((e: unknown) => ctx.state.log.warn({ err: e }, 'idempotency renewal failed'));
    }, IDEMPOTENCY_RENEW_MS);
    try {
      await next();
    } catch (err) {
      clearInterval(renew);
      const r = renderError(err, ctx.state.requestId, d.options.docsUrl);
      // Only definite answers are replayed; 5xx and 429 may be retried for real.
      if (r.status < 500 && r.status !== 429) {
        ctx.type = 'application/json';
        await store(r.status, JSON.stringify(r.body));
      } else await d.store.releaseIdempotency(customer, key);
      throw err;
    }
    clearInterval(renew);
    if (ctx.status < 500 && ctx.status !== 429) await store(ctx.status, JSON.stringify(ctx.body));
    else await d.store.releaseIdempotency(customer, key);
  };
}
