// Public (no key) routes, each limited per source IP: sign-up, contact,
// verification, keys, health, metrics and the error documentation pages.
import { createHash, timingSafeEqual } from 'node:crypto';
import Router from '@koa/router';
import { ApiError, invalid } from '../../../shared/errors.js';
import { within } from '../../../shared/time.js';
import { contactSchema, parseBody, parseJsonObject, signupSchema } from '../../domain/index.js';
import { ByteBudget, readJsonBytes } from '../body.js';
import type { AppDeps, Ctx } from '../context.js';
import { errorDocPages } from '../error-docs.js';
import { openapiDocument } from '../openapi.js';
import { ipLimit, json } from '../middleware.js';
import { queryParam } from '../query.js';

/**
 * SPEC "Limits": per-IP limits on public endpoints, requests per minute.
 * Health and the error pages are not numbered there: generous, so probes and
 * readers never hit them, yet bounded (docs/CONTROL_PLANE.md).
 */
export const PUBLIC_LIMITS = {
  signup: 10,
  verify: 60,
  contact: 5,
  cdpVerify: 30,
  keys: 120,
  health: 600,
  docs: 600,
} as const;

/** Verify bodies up to this size are parsed and verified in the request thread (a proof is ~6 KB). */
export const VERIFY_INLINE_MAX_BYTES = 64 * 1024;

/** Error pages: nothing but the document itself may load (no scripts, styles, frames, forms). */
const DOCS_CSP = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

export function publicRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;
  // Verify bodies of all clients together (an AuditRecord may be megabytes).
  const verifyBudget = new ByteBudget(d.options.http.verifyInflightBytes);
  const docs = errorDocPages(d.options.docsUrl);
  const health = ipLimit(d, 'health', PUBLIC_LIMITS.health);

  r.post('/v1/signup', ipLimit(d, 'signup', PUBLIC_LIMITS.signup), async (ctx: Ctx) => {
    const b = parseBody(signupSchema, await json(ctx));
    ctx.status = 201;
    ctx.body = await s.accounts.signup(b.email, b.jurisdiction);
  });

  r.post('/v1/contact', ipLimit(d, 'contact', PUBLIC_LIMITS.contact), async (ctx: Ctx) => {
    const b = parseBody(contactSchema, await json(ctx));
    await s.accounts.contact(b);
    ctx.body = { status: 'received' };
  });

  r.post('/v1/verify', ipLimit(d, 'verify', PUBLIC_LIMITS.verify), async (ctx: Ctx) => {
    const raw = await readJsonBytes(ctx, {
      limit: d.options.http.verifyMaxBytes,
      idleTimeoutMs: d.options.http.bodyIdleTimeoutMs,
      budget: verifyBudget,
    });
    // A large record takes long to parse and verify: off the request thread, one at a time.
    ctx.body =
      raw.length <= VERIFY_INLINE_MAX_BYTES
        ? s.proofs.verifyRequest(parseJsonObject(raw.toString('utf8')))
        : await s.proofs.verifyRequestJson(raw);
  });

  r.get('/v1/capsules/:id/cdp/verify', ipLimit(d, 'cdp-verify', PUBLIC_LIMITS.cdpVerify), async (ctx: Ctx) => {
    const format = queryParam(ctx, 'format');
    if (format !== undefined && format !== 'presentation') throw invalid('format', 'only "presentation" is supported');
    ctx.body = await s.proofs.publicProof(ctx.params.id ?? '', format === 'presentation');
  });

  // Public: the authorities and key versions this install signs with, for offline key resolution.
  r.get('/v1/trust-manifest', ipLimit(d, 'keys', PUBLIC_LIMITS.keys), async (ctx: Ctx) => {
    ctx.body = s.proofs.trustManifest();
  });

  r.get('/v1/keys/:id', ipLimit(d, 'keys', PUBLIC_LIMITS.keys), async (ctx: Ctx) => {
    ctx.body = await s.proofs.key(ctx.params.id ?? '');
  });

  r.get('/v1/health', health, async (ctx: Ctx) => {
    ctx.body = { status: 'healthy', version: d.options.version, timestamp: d.clock.nowIso() };
  });

  const openapi = openapiDocument(d.options.version);
  r.get('/v1/openapi.json', health, async (ctx: Ctx) => {
    ctx.body = openapi;
  });

  r.get('/metrics', health, async (ctx: Ctx) => {
    const token = d.options.metricsToken;
    if (token !== null && !bearerMatches(ctx.get('authorization'), token))
      throw new ApiError('invalid_api_key', 'metrics need the operator bearer token (CAPSULE_METRICS_TOKEN)');
    ctx.type = d.metrics.registry.contentType;
    ctx.body = await d.metrics.registry.metrics();
  });

  r.get('/v1/health/ready', health, async (ctx: Ctx) => {
    const checks = { database: 'ok', migrations: 'ok', runner: 'ok', recovery: 'ok' };
    await within(d.store.pendingMigrations(), 2000).then(
      (pending) => {
        if (pending.length > 0) checks.migrations = 'pending';
      },
      () => {
        checks.database = 'unavailable';
        checks.migrations = 'unknown';
      },
    );
    // The runner's hello carries what the node can still admit (memory committed to capsules).
    const hello = await within(d.runner.hello(), 2000).catch(() => {
      checks.runner = 'unavailable';
      return null;
    });
    // A runner that came back (a restart) has its dead predecessor's capsules reconciled first
    // (expired_unclean, partial proofs): until then their status still says active.
    if (checks.runner === 'ok' && !s.recovery.report)
      await within(s.recovery.ensure(), 2000).catch(() => (checks.recovery = 'pending'));
    if (Object.values(checks).some((v) => v !== 'ok')) {
      const why = `database ${checks.database}, migrations ${checks.migrations}, runner ${checks.runner}, recovery ${checks.recovery}`;
      throw new ApiError('service_unavailable', `not ready: ${why}`, {
        extra: { retry_after: 5 },
      });
    }
    const c = hello?.capacity;
    ctx.body = {
      status: 'ready',
      checks,
      ...(c
        ? {
            capacity: {
              memory_mb: c.memory_mb,
              committed_mb: c.committed_mb,
              free_mb: c.free_mb,
              capsules: c.capsules,
              max_capsules: c.max_capsules,
            },
          }
        : {}),
      timestamp: d.clock.nowIso(),
    };
  });

  // Where every envelope's doc_url points: HTML, or JSON on request.
  r.get('/docs/errors/:code', ipLimit(d, 'docs', PUBLIC_LIMITS.docs), async (ctx: Ctx) => {
    const page = docs.get(ctx.params.code ?? '');
    if (!page) throw new ApiError('resource_not_found', 'no such error code');
    ctx.vary('Accept');
    if (ctx.accepts('html', 'json') === 'json') {
      ctx.body = page.json;
      return;
    }
    ctx.set('Content-Security-Policy', DOCS_CSP);
    ctx.type = 'text/html; charset=utf-8';
    ctx.body = page.html;
  });

  return r;
}

/** Constant-time comparison of `Authorization: Bearer <token>` with the operator's token. */
function bearerMatches(header: string, token: string): boolean {
  const got = createHash('sha256')
    .update(header.replace(/^Bearer\s+/i, ''))
    .digest();
  const want = createHash('sha256').update(token).digest();
  return /^Bearer\s+/i.test(header) && timingSafeEqual(got, want);
}
