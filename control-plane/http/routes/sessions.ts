// The session-named variant (SPEC "Session-named variant"): the same lifecycle
// under /v1/sessions, answering with the older field names and proof form.
import Router from '@koa/router';
import { checkExecSizes, createSessionSchema, parseBody, sessionExecSchema } from '../../domain/index.js';
import { emitLegacySessionProof } from '../../service/index.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth, json } from '../middleware.js';
import { answerJson } from '../sliced-json.js';

/** Where a session command reads its input (SPEC: `<tmpfs>/input/data`). */
const SESSION_INPUT = '/data/input/data';

export function sessionRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;
  const a = auth(d);

  r.post('/v1/sessions', a, async (ctx: Ctx) => {
    const b = parseBody(createSessionSchema, await json(ctx));
    const c = await s.capsules.create(caller(ctx), {
      ttl: b.ttl,
      data_classification: b.data_classification,
      metadata: {},
      form: 'session',
    });
    ctx.status = 201;
    ctx.body = {
      session_id: c.id,
      status: c.status,
      ttl_seconds: c.ttl_seconds,
      created_at: c.created_at,
      expires_at: c.expires_at,
    };
  });

  // The session form of GET /v1/capsules/:id: the same status read under the variant's names.
  r.get('/v1/sessions/:id', a, async (ctx: Ctx) => {
    const c = await s.capsules.owned(caller(ctx), ctx.params.id ?? '', 'session');
    ctx.body = {
      session_id: c.id,
      status: c.status,
      ttl_seconds: c.ttl_seconds,
      created_at: c.created_at,
      expires_at: c.expires_at,
      data_classification: c.data_classification,
      execution_count: c.execution_count,
      bytes_processed: c.bytes_processed,
      ...(c.destroyed_at ? { destroyed_at: c.destroyed_at } : {}),
    };
  });

  r.post('/v1/sessions/:id/exec', a, async (ctx: Ctx) => {
    const id = ctx.params.id ?? '';
    await s.capsules.owned(caller(ctx), id, 'session');
    const b = parseBody(sessionExecSchema, await json(ctx));
    checkExecSizes(b);
    // The runner refuses an input path without input bytes: name it only when there is input.
    const req = b.input_data === undefined ? b : { ...b, input_filename: SESSION_INPUT };
    const res = await s.capsules.exec(caller(ctx), id, req, 'session');
    const view = {
      session_id: id,
      output: res.stdout,
      stderr: res.stderr,
      exit_code: res.exit_code,
      timed_out: res.timed_out,
      duration_ms: res.duration_ms,
    };
    answerJson(ctx, view, res.stdout.length, res.stderr.length);
  });

  r.delete('/v1/sessions/:id', a, async (ctx: Ctx) => {
    const c = await s.capsules.owned(caller(ctx), ctx.params.id ?? '', 'session');
    await s.recovery.ensure();
    const res = await s.destruction.destroy(c, 'customer_request');
    const legacy = emitLegacySessionProof(c.id, String(res.destroyed_at), d.random, d.clock.nowIso());
    await d.store.insertKey(legacy.key);
    ctx.body = {
      session_id: c.id,
      status: 'destroyed',
      destroyed_at: res.destroyed_at,
      cdp: legacy.doc,
      proof_url: `/v1/proofs/${c.id}`,
    };
  });

  return r;
}
