// SPEC points measured off on an earlier build, over real HTTP against a real
// runner on SQLite and PostgreSQL: integer duration_ms, the public AuditProof
// with its activity trail, the presentation form's reduced-scope online
// check, per-tier upload bounds and integer limits, a large AuditRecord
// verified online, the session key id form and session read, null as
// absent, entrypoints in /capsule/app, downloads as attachments, error
// details and unknown runner failures as 500.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { verifyProof } from '../../shared/proof/index.js';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, envelope, start, type Api } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const KEY_ID = /^svc-verify-\d{8}T\d{12}Z-.{12}$/;

function cliVerify(doc: unknown): { status: number | null; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'cp-verify-'));
  try {
    writeFileSync(join(dir, 'proof.json'), JSON.stringify(doc));
    const r = spawnSync(process.execPath, [CLI, 'verify', join(dir, 'proof.json')], { encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The real runner client, except that exec of the command `BUG` fails the way a bug would (a TypeError). */
function withInjectedBug(c: RunnerPort): RunnerPort {
  return {
    hello: () => c.hello(),
    create: (r) => c.create(r),
    exec: (r) => (r.command === 'BUG' ? Promise.reject(new TypeError('injected bug')) : c.exec(r)),
    upload: (id, f, b) => c.upload(id, f, b),
    listOutput: (id) => c.listOutput(id),
    readOutput: (id, f) => c.readOutput(id, f),
    destroy: (id) => c.destroy(id),
    list: () => c.list(),
    close: () => c.close(),
  };
}

async function create(api: Api, key: string, json: unknown = {}): Promise<any> {
  const r = await api.req('POST', '/v1/capsules', { key, json });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
  return r.body;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: SPEC conformance`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const logs: string[] = [];
    const logger = pino(
      { level: 'error' },
      new Writable({
        write(chunk, _enc, cb) {
          logs.push(String(chunk));
          cb();
        },
      }),
    );
    const s = await start(driver, withInjectedBug(runner.client), { CAPSULE_RATE_LIMITS: 'off' }, undefined, {
      logger,
    });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup();

    await t.test('duration_ms is an integer: exec, session exec, ExecutionCompleted', async (t) => {
      const c = await create(api, alice.key);
      for (let i = 0; i < 3; i++) {
        const ex = await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: 'true' } });
        t.ok(Number.isInteger(ex.body.duration_ms), `exec duration_ms ${ex.body.duration_ms}`);
      }
      const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      const done = d.body.cdp.activity.filter((e: any) => e.type === 'ExecutionCompleted');
      t.equal(done.length, 3);
      t.ok(
        done.every((e: any) => Number.isInteger(e.duration_ms)),
        'ExecutionCompleted.duration_ms in the signed trail',
      );
      const sess = await api.req('POST', '/v1/sessions', { key: alice.key, json: {} });
      const sx = await api.req('POST', `/v1/sessions/${sess.body.session_id}/exec`, {
        key: alice.key,
        json: { command: 'true' },
      });
      t.ok(Number.isInteger(sx.body.duration_ms), `session duration_ms ${sx.body.duration_ms} (${sx.text})`);
      await api.req('DELETE', `/v1/sessions/${sess.body.session_id}`, { key: alice.key });
    });

    await t.test('cdp/verify: the canonical AuditProof with its activity trail, no internal ids', async (t) => {
      const c = await create(api, alice.key);
      await api.req('POST', `/v1/capsules/${c.id}/upload?filename=a.csv`, { key: alice.key, raw: 'a,b\n' });
      await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: 'true' } });
      const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      const pub = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify`);
      t.equal(pub.status, 200);
      t.same(pub.body.activity, d.body.cdp.activity, 'the trail as recorded');
      t.notOk('evidence' in pub.body || 'internal' in pub.body, 'record-only members stay out');
      t.notMatch(pub.text, alice.customer_id, 'no account id anywhere');
      const { activity: _a, ...proof } = pub.body;
      t.same(proof, d.body.audit_proof, 'otherwise the shareable AuditProof');
      t.equal(verifyProof(pub.body).valid, true, 'verifies offline, trail bound by activity_root');
      const online = await api.req('POST', '/v1/verify', { json: { cdp: pub.body } });
      t.equal(online.body.valid, true);
      const forged = structuredClone(pub.body);
      forged.activity[1].size_bytes += 1;
      const bad = await api.req('POST', '/v1/verify', { json: { cdp: forged } });
      t.same(bad.body.failure_reason, { type: 'ActivityMismatch', reason: 'RootMismatch' }, 'the trail is bound');
    });

    await t.test('presentation: verified online at reduced scope, refused offline', async (t) => {
      const c = await create(api, alice.key);
      const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      const pres = (await api.req('GET', `/v1/capsules/${c.id}/cdp/verify?format=presentation`)).body;
      const r = await api.req('POST', '/v1/verify', { json: { cdp: pres } });
      t.equal(r.status, 200);
      t.equal(r.body.valid, true, r.text);
      t.equal(r.body.scope, 'reduced');
      t.notOk('chain_integrity' in r.body.checks, 'no chain was checked');
      t.match(r.body.checks, {
        cdp_version_valid: true,
        final_hash_valid: true,
        step_count: 8,
        signature_valid: true,
        algorithm: 'Ed25519',
        document_hash_recomputed: false,
      });
      t.equal(pres.document_hash, d.body.cdp.canonical_hash);
      const wrongHash = { ...pres, document_hash: `sha512:${'0'.repeat(128)}` };
      t.same((await api.req('POST', '/v1/verify', { json: { cdp: wrongHash } })).body.failure_reason, {
        type: 'SignatureMismatch',
        reason: 'DoesNotVerify',
      });
      const wrongTime = { ...pres, destruction: { ...pres.destruction, destroyed_at: '2030-01-01T00:00:00.000000Z' } };
      const wt = (await api.req('POST', '/v1/verify', { json: { cdp: wrongTime } })).body;
      t.same(
        [wt.valid, wt.scope, wt.failure_reason],
        [false, 'reduced', { type: 'FinalHashMismatch', reason: 'DoesNotMatchStep8' }],
      );
      const cli = cliVerify(pres);
      t.not(cli.status, 0, 'the offline CLI refuses it by design');
      t.match(cli.out, /PresentationForm/);
      const full = await api.req('POST', '/v1/verify', { json: { cdp: d.body.audit_proof } });
      t.notOk('scope' in full.body, 'a full proof is verified at full scope');
      t.equal(full.body.checks.chain_integrity, true);
      // A real runner's wipe of an ordinary capsule: every step performed, stated and signed.
      t.equal(d.body.audit_proof.termination.destruction, 'complete', JSON.stringify(d.body.cdp.evidence));
      t.same(full.body.destruction, { status: 'complete' });
      t.equal(full.body.summary, 'AuditProof verified');
      t.match(r.body.summary, /^AuditProof verified at reduced scope/);
    });

    await t.test('an incomplete destruction is stated online as offline', async (t) => {
      const v = JSON.parse(
        readFileSync(
          new URL('../../../test/data/destruction-vectors/valid-incomplete-one-step.json', import.meta.url),
          'utf8',
        ),
      );
      const r = await api.req('POST', '/v1/verify', { json: { cdp: v.document } });
      t.equal(r.body.valid, true);
      t.equal(r.body.summary, v.summary);
      t.match(r.body.summary, /^AuditProof verified; destruction reported incomplete \(step 3: /);
    });

    await t.test('uploads: bounded per tier, reported in limits, 413 names the bound', async (t) => {
      const me = (await api.req('GET', '/v1/customers/me', { key: alice.key })).body;
      t.equal(me.limits.upload_max_bytes, 16 * 1024 * 1024, 'Free');
      const c = await create(api, alice.key);
      const over = Buffer.alloc(16 * 1024 * 1024 + 1, 1);
      const e = envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/upload?filename=big`, { key: alice.key, raw: over }),
        413,
        'payload_too_large',
      );
      t.match(e.message, /^body: exceeds 16777216 bytes, the upload bound of tier free/);
      t.same([e.field, e.limit], ['body', 'upload_max_bytes']);
      await s.cp.services.accounts.setTier(alice.email, 'business');
      const biz = (await api.req('GET', '/v1/customers/me', { key: alice.key })).body;
      t.equal(biz.limits.upload_max_bytes, 64 * 1024 * 1024, 'Team (business)');
      const ok = await api.req('POST', `/v1/capsules/${c.id}/upload?filename=big`, { key: alice.key, raw: over });
      t.equal(ok.status, 200, 'the same file fits the Team bound');
      await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      for (const tier of ['starter', 'enterprise', 'free'] as const) {
        await s.cp.services.accounts.setTier(alice.email, tier);
        const l = (await api.req('GET', '/v1/customers/me', { key: alice.key })).body.limits;
        for (const [k, v] of Object.entries(l)) t.ok(Number.isInteger(v), `${tier} limits.${k} is an integer (${v})`);
        t.ok(l.upload_max_bytes >= 16 * 1024 * 1024, 'Free has the smallest upload bound');
      }
    });

    // SQLite only: the verify path does not touch storage, and 2,000 single-event commits take ~30 s on PostgreSQL here.
    await t.test(
      'a busy capsule: its AuditRecord (1,000 execs) verifies online',
      { skip: driver !== 'sqlite' },
      async (t) => {
        const c = await create(api, alice.key);
        for (let i = 0; i < 5; i++)
          await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: `echo ${i}` } });
        // 995 more exec pairs in the shape the service records them (running each would take a minute).
        const trail = await s.cp.store.activity(c.id);
        const [started, completed] = [trail.at(-2)!, trail.at(-1)!];
        const fields = (e: Record<string, unknown>): Record<string, unknown> => {
          const { seq: _s, type: _t, at: _a, ...f } = e;
          return f;
        };
        for (let i = 0; i < 995; i++) {
          await s.cp.store.appendActivity(c.id, 'ExecutionStarted', started.at, fields(started));
          await s.cp.store.appendActivity(c.id, 'ExecutionCompleted', completed.at, fields(completed));
        }
        const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
        t.equal(d.status, 200);
        const record = (await api.req('GET', `/v1/capsules/${c.id}/cdp`, { key: alice.key })).text;
        t.ok(record.length > 600 * 1024, `the record is ${record.length} bytes (the old bound was 600 KiB)`);
        const r = await api.req('POST', '/v1/verify', {
          raw: `{"cdp":${record}}`,
          headers: { 'content-type': 'application/json' },
        });
        t.equal(r.status, 200, r.text.slice(0, 200));
        t.equal(r.body.valid, true);
      },
    );

    await t.test('sessions: key id in the contract form, GET /v1/sessions/:id', async (t) => {
      const sres = await api.req('POST', '/v1/sessions', { key: alice.key, json: { data_classification: 'PII' } });
      const id = sres.body.session_id;
      const read = await api.req('GET', `/v1/sessions/${id}`, { key: alice.key });
      t.equal(read.status, 200, read.text);
      t.match(read.body, { session_id: id, status: 'active', ttl_seconds: sres.body.ttl_seconds, execution_count: 0 });
      const bob = await api.signup();
      envelope(t, await api.req('GET', `/v1/sessions/${id}`, { key: bob.key }), 404, 'resource_not_found');
      const del = await api.req('DELETE', `/v1/sessions/${id}`, { key: alice.key });
      const legacyKey = del.body.cdp.attestation.key_id;
      t.match(legacyKey, KEY_ID, `legacy key id ${legacyKey} has the docs/PROOF_FORMAT.md key id form`);
      const full = (await api.req('GET', `/v1/proofs/${id}`, { key: alice.key })).body.cdp;
      t.match(full.attestation.key_id, KEY_ID);
      t.not(legacyKey, full.attestation.key_id, 'two keys, two names');
      const k = await api.req('GET', `/v1/keys/${legacyKey}`);
      t.equal(k.status, 200);
      t.equal(`base64:${k.body.public_key}`, del.body.cdp.attestation.public_key);
      t.equal(verifyProof(del.body.cdp).valid, true);
      t.equal((await api.req('GET', `/v1/sessions/${id}`, { key: alice.key })).body.status, 'destroyed');
    });

    await t.test('members the service answers as null are accepted back as absent', async (t) => {
      const c = await create(api, alice.key, { capsulefile_id: null, egress_profile_id: null, metadata: null });
      t.equal(c.capsulefile_id, null);
      const again = await create(api, alice.key, {
        ttl: c.ttl_seconds,
        data_classification: c.data_classification,
        capsulefile_id: c.capsulefile_id,
        metadata: c.metadata,
      });
      t.equal(again.status, 'active');
      const ex = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
        key: alice.key,
        json: { command: 'true', input_data: null, timeout: null },
      });
      t.equal(ex.status, 200, ex.text);
      for (const x of [c, again]) await api.req('DELETE', `/v1/capsules/${x.id}`, { key: alice.key });
    });

    await t.test('a Capsulefile entrypoint runs in /capsule/app; plain commands in /data', async (t) => {
      const cf = await api.req('POST', '/v1/capsulefiles', {
        key: alice.key,
        json: { name: 'relative', runtime: 'python3', entrypoint: 'python3 main.py' },
      });
      await api.req('POST', `/v1/capsulefiles/${cf.body.id}/files?filename=main.py`, {
        key: alice.key,
        raw: 'import os\nprint(os.getcwd(), open("data.txt").read().strip())\n',
      });
      await api.req('POST', `/v1/capsulefiles/${cf.body.id}/files?filename=data.txt`, { key: alice.key, raw: 'hi\n' });
      t.equal((await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: alice.key })).status, 200);
      const c = await create(api, alice.key, { capsulefile_id: cf.body.id });
      const ep = await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: {} });
      t.equal(ep.body.exit_code, 0, ep.body.stderr);
      t.equal(ep.body.stdout, '/capsule/app hi\n', 'relative paths resolve next to the files');
      const plain = await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: 'pwd' } });
      t.equal(plain.body.stdout, '/data\n');
      await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
    });

    await t.test('downloads are attachments, never rendered from the API origin', async (t) => {
      const c = await create(api, alice.key);
      const name = 'résumé "x".html';
      await api.req('POST', `/v1/capsules/${c.id}/exec`, {
        key: alice.key,
        json: {
          command: `printf '<script>alert(1)</script>' > '/data/output/${name}'; printf '<x/>' > /data/output/a.xml`,
        },
      });
      const r = await api.req('GET', `/v1/capsules/${c.id}/output/${encodeURIComponent(name)}`, { key: alice.key });
      t.equal(r.status, 200, r.text);
      t.equal(
        r.headers.get('content-disposition'),
        `attachment; filename="r_sum_ _x_.html"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22x%22.html`,
      );
      t.equal(r.headers.get('x-content-type-options'), 'nosniff');
      t.equal(r.headers.get('content-security-policy'), "default-src 'none'; frame-ancestors 'none'");
      const x = await api.req('GET', `/v1/capsules/${c.id}/output/a.xml`, { key: alice.key });
      t.match(x.headers.get('content-disposition'), /^attachment; filename="a\.xml"/);
      await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
    });

    await t.test('error details reach the customer; a runner bug is a logged 500, not a 503', async (t) => {
      const bad = await api.req('POST', '/v1/capsules', { key: alice.key, json: { ttl: 'long' } });
      t.equal(envelope(t, bad, 400, 'invalid_parameters').field, 'ttl');
      const held = [await create(api, alice.key), await create(api, alice.key), await create(api, alice.key)];
      const q = envelope(t, await api.req('POST', '/v1/capsules', { key: alice.key, json: {} }), 402, 'quota_exceeded');
      t.equal(q.limit, 'concurrent_capsules');
      const ex = await api.req('POST', `/v1/capsules/${held[0].id}/exec`, {
        key: alice.key,
        json: { command: 'true', input_filename: '/data/input/x', input_data: 'x' },
      });
      t.equal(ex.status, 200);
      const bug = await api.req('POST', `/v1/capsules/${held[0].id}/exec`, {
        key: alice.key,
        json: { command: 'BUG' },
      });
      const e = envelope(t, bug, 500, 'internal_error');
      t.notOk(bug.headers.get('retry-after'), 'no Retry-After: retrying does not fix a bug');
      t.notMatch(bug.text, /injected bug/, 'the cause stays internal');
      const line = logs.find((l) => l.includes(e.request_id));
      t.ok(line, 'logged with the request id');
      t.match(line, /injected bug/, 'with its cause');
      const st = await api.req('GET', `/v1/capsules/${held[0].id}`, { key: alice.key });
      t.equal(st.body.status, 'active', 'the capsule is left usable');
      for (const c of held) await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
    });
  });
}
