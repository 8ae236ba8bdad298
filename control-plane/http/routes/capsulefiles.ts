// Authenticated Capsulefile routes (SPEC "Capsulefiles", docs/CAPSULEFILE.md).
import Router from '@koa/router';
import { ApiError, invalid } from '../../../shared/errors.js';
import { limits } from '../../capsulefile/index.js';
import { readRaw } from '../body.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth, idempotent, json } from '../middleware.js';
import { paging } from '../paging.js';
import { queryParam } from '../query.js';
import { capsulefileDetail, capsulefileItem } from './views.js';

const CURSOR_RE = /^[0-9TZ:.-]{20,40}\|cf_[a-z0-9_]{1,64}$/;

export function capsulefileRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services.capsulefiles;
  const a = auth(d);

  r.post('/v1/capsulefiles', a, idempotent(d), async (ctx: Ctx) => {
    const c = await s.create(caller(ctx), await json(ctx));
    ctx.status = 201;
    ctx.set('Location', `/v1/capsulefiles/${c.id}`);
    ctx.body = {
      id: c.id,
      status: c.status,
      name: c.definition.name,
      content_hash: c.content_hash,
      created_at: c.created_at,
    };
  });

  r.get('/v1/capsulefiles', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, CURSOR_RE);
    const page = await s.list(caller(ctx), limit, cursor);
    ctx.body = { items: page.items.map(capsulefileItem), next_cursor: page.next_cursor };
  });

  r.get('/v1/capsulefiles/:id', a, async (ctx: Ctx) => {
    const { capsulefile, files } = await s.detail(caller(ctx), ctx.params.id ?? '');
    ctx.body = capsulefileDetail(capsulefile, files);
  });

  r.patch('/v1/capsulefiles/:id', a, async (ctx: Ctx) => {
    const c = await s.update(caller(ctx), ctx.params.id ?? '', await json(ctx));
    ctx.body = capsulefileDetail(c, await s.detail(caller(ctx), c.id).then((x) => x.files));
  });

  r.post('/v1/capsulefiles/:id/files', a, async (ctx: Ctx) => {
    const id = ctx.params.id ?? '';
    const filename = queryParam(ctx, 'filename', true);
    // Ownership and draft state before reading up to 16 MiB of body.
    await s.ownDraft(caller(ctx), id);
    let bytes: Buffer;
    try {
      bytes = await readRaw(ctx, { limit: limits.FILE_MAX_BYTES, idleTimeoutMs: ctx.state.http.bodyIdleTimeoutMs });
    } catch (e) {
      // A Capsulefile file over its fixed bound is bad input (400, docs/CAPSULEFILE.md), not a tier limit.
      if (e instanceof ApiError && e.code === 'payload_too_large')
        throw invalid('body', `file is larger than ${limits.FILE_MAX_BYTES} bytes`);
      throw e;
    }
    const entry = await s.addFile(caller(ctx), id, filename, bytes);
    ctx.body = { capsulefile_id: id, filename: entry.filename, size_bytes: entry.size_bytes, sha512: entry.sha512 };
  });

  r.post('/v1/capsulefiles/:id/finalize', a, idempotent(d), async (ctx: Ctx) => {
    const c = await s.finalize(caller(ctx), ctx.params.id ?? '');
    ctx.body = {
      id: c.id,
      status: c.status,
      content_hash: c.content_hash,
      size_bytes: c.size_bytes,
      file_count: c.file_count,
      finalized_at: c.finalized_at,
    };
  });

  r.delete('/v1/capsulefiles/:id', a, async (ctx: Ctx) => {
    await s.delete(caller(ctx), ctx.params.id ?? '');
    ctx.status = 204;
  });

  return r;
}
