// Authenticated capsule and proof routes.
import Router from '@koa/router';
import { ApiError, invalid } from '../../../shared/errors.js';
import { checkExecSizes, createCapsuleSchema, execSchema, parseBody, validateMetadata } from '../../domain/index.js';
import { readRaw } from '../body.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth, idempotent, json } from '../middleware.js';
import { paging } from '../paging.js';
import { queryParam } from '../query.js';
import { answerJson } from '../sliced-json.js';
import { attachment, capsuleCreated, capsuleStatus, contentTypeFor, execView, fileView, storageView } from './views.js';

const CURSOR_RE = /^[0-9TZ:.-]{20,40}\|[a-z]+_[0-9a-f]{1,64}$/;
/** Where a Capsulefile entrypoint starts: its files, read-only (docs/CAPSULEFILE.md). */
const ENTRYPOINT_CWD = '/capsule/app' as const;

export function capsuleRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;
  const a = auth(d);

  r.post('/v1/capsules', a, idempotent(d), async (ctx: Ctx) => {
    const body = parseBody(createCapsuleSchema, await json(ctx));
    if (body.ttl !== undefined && body.max_lifetime_seconds !== undefined && body.ttl !== body.max_lifetime_seconds) {
      throw invalid('max_lifetime_seconds', 'must equal ttl when both are given');
    }
    // A retry of a create whose process died after the capsule was written: that capsule, not a second one.
    const earlier = ctx.state.idempotentResource;
    const c = earlier
      ? await s.capsules.owned(caller(ctx), earlier)
      : await s.capsules.create(caller(ctx), {
          ttl: body.ttl ?? body.max_lifetime_seconds,
          data_classification: body.data_classification,
          capsulefile_id: body.capsulefile_id,
          egress_profile_id: body.egress_profile_id,
          metadata: validateMetadata(body.metadata),
          form: 'capsule',
          idempotency_key: ctx.state.idempotencyKey,
        });
    ctx.status = 201;
    ctx.set('Location', `/v1/capsules/${c.id}`);
    ctx.body = capsuleCreated(c);
  });

  r.get('/v1/capsules', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, CURSOR_RE);
    const page = await s.capsules.list(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(capsuleStatus), next_cursor: page.next_cursor };
  });

  r.get('/v1/capsules/:id', a, async (ctx: Ctx) => {
    const c = await s.capsules.owned(caller(ctx), ctx.params.id ?? '');
    const usage = await s.capsules.usage(c);
    ctx.body = { ...capsuleStatus(c), ...(usage ? { storage: storageView(usage) } : {}) };
  });

  r.post('/v1/capsules/:id/exec', a, async (ctx: Ctx) => {
    const id = ctx.params.id ?? '';
    // Ownership (404) before the body (400); exec() checks liveness again after the body is read.
    const c = await s.capsules.owned(caller(ctx), id);
    const parsed = parseBody(execSchema, await json(ctx));
    // The entrypoint runs where the Capsulefile's files are; a command given here runs in /data.
    const body =
      parsed.command !== undefined
        ? { ...parsed, command: parsed.command }
        : { ...parsed, command: await s.capsules.entrypointFor(c), cwd: ENTRYPOINT_CWD };
    checkExecSizes(body);
    const r = await s.capsules.exec(caller(ctx), id, body);
    answerJson(ctx, execView(id, r), r.stdout.length, r.stderr.length);
  });

  r.post('/v1/capsules/:id/upload', a, async (ctx: Ctx) => {
    const id = ctx.params.id ?? '';
    const filename = queryParam(ctx, 'filename', true);
    await s.capsules.ownedLive(caller(ctx), id);
    const account = caller(ctx).account;
    const limit = s.accounts.limits(account).upload_max_bytes;
    let bytes: Buffer;
    try {
      bytes = await readRaw(ctx, { limit, idleTimeoutMs: ctx.state.http.bodyIdleTimeoutMs });
    } catch (e) {
      if (e instanceof ApiError && e.code === 'payload_too_large')
        throw new ApiError(
          'payload_too_large',
          `body: exceeds ${limit} bytes, the upload bound of tier ${account.tier} (limits.upload_max_bytes)`,
          { extra: { field: 'body', limit: 'upload_max_bytes' } },
        );
      throw e;
    }
    const entry = await s.capsules.upload(caller(ctx), id, filename, bytes);
    ctx.body = { capsule_id: id, ...fileView(entry) };
  });

  r.get('/v1/capsules/:id/output', a, async (ctx: Ctx) => {
    const id = ctx.params.id ?? '';
    const files = await s.capsules.listOutput(caller(ctx), id);
    ctx.body = { capsule_id: id, files: files.map(fileView) };
  });

  r.get('/v1/capsules/:id/output/:filename', a, async (ctx: Ctx) => {
    const out = await s.capsules.readOutput(caller(ctx), ctx.params.id ?? '', ctx.params.filename ?? '');
    ctx.set('X-Svc-File-Sha512', out.entry.sha512);
    ctx.set('Content-Disposition', attachment(out.entry.filename));
    ctx.type = contentTypeFor(out.entry.filename);
    ctx.body = Buffer.from(out.bytes);
  });

  r.delete('/v1/capsules/:id', a, async (ctx: Ctx) => {
    const c = await s.capsules.owned(caller(ctx), ctx.params.id ?? '', 'capsule');
    await s.recovery.ensure();
    ctx.body = await s.destruction.destroy(c, 'customer_request');
  });

  r.get('/v1/capsules/:id/cdp', a, async (ctx: Ctx) => {
    ctx.body = await s.proofs.record(caller(ctx), ctx.params.id ?? '');
  });

  r.get('/v1/proofs/:capsule_id', a, async (ctx: Ctx) => {
    ctx.body = await s.proofs.proofRecord(caller(ctx), ctx.params.capsule_id ?? '');
  });

  r.get('/v1/customers/me', a, async (ctx: Ctx) => {
    ctx.body = await s.accounts.me(caller(ctx));
  });

  return r;
}
