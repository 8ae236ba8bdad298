// The whole capsule lifecycle over real HTTP against a real sandbox runner,
// on SQLite and PostgreSQL: every proof verifies with the shared/ library.
import t from 'tap';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyProof } from '../../shared/proof/index.js';
import { FORK_LOOP_AT_BOUND, startRunner } from '../helpers/runner.js';
import { DRIVERS, dbQuery, envelope, start, type Api } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
/** `capsule verify FILE`: the offline CLI's exit code and output. */
function cliVerify(doc: unknown): { status: number | null; out: string } {
  const dir = mkdtempSync(join(tmpdir(), 'cp-verify-'));
  try {
    const file = join(dir, 'proof.json');
    writeFileSync(file, JSON.stringify(doc));
    const r = spawnSync(process.execPath, [CLI, 'verify', file], { encoding: 'utf8' });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

const sha512 = (b: Uint8Array | string): string => `sha512:${createHash('sha512').update(b).digest('hex')}`;

async function create(api: Api, key: string, json: unknown = {}): Promise<any> {
  const r = await api.req('POST', '/v1/capsules', { key, json });
  if (r.status !== 201) throw new Error(`create: ${r.status} ${r.text}`);
  return r.body;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: lifecycle`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup(undefined, 'EU');
    const bob = await api.signup(undefined, 'US');

    await t.test('create -> upload -> exec -> output -> destroy -> proofs', async (t) => {
      const meta = {
        'patient-ref': 'Zoë ✓ 日本語',
        ключ: 'значение',
        '🔑': '\u0000 nul and \u202e bidi',
        ['__proto__']: 'plain data',
      };
      const raw = JSON.stringify({ ttl: 120, data_classification: 'PHI', metadata: meta });
      const cr = await api.req('POST', '/v1/capsules', {
        key: alice.key,
        raw,
        headers: { 'content-type': 'application/json' },
      });
      t.equal(cr.status, 201, cr.text);
      const c = cr.body;
      t.match(c.id, /^cap_[0-9a-f]{24}$/);
      t.equal(c.status, 'active');
      t.equal(c.ttl_seconds, 120);
      t.equal(c.data_classification, 'PHI');
      t.equal(c.capsulefile_id, null);
      t.equal(Date.parse(c.expires_at) - Date.parse(c.created_at), 120_000);
      const st = await api.req('GET', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(st.status, 200);
      t.same(JSON.parse(st.text).metadata, JSON.parse(JSON.stringify(meta)), 'unicode metadata round-trips');
      t.ok(
        Object.prototype.hasOwnProperty.call(JSON.parse(st.text).metadata, '__proto__'),
        '__proto__ is kept as a plain key',
      );
      t.equal(st.body.execution_count, 0);

      // Another customer's ids are 404 everywhere, and nothing moves.
      for (const [m, p] of [
        ['GET', ''],
        ['POST', '/exec'],
        ['POST', '/upload?filename=x'],
        ['GET', '/output'],
        ['GET', '/output/x'],
        ['DELETE', ''],
        ['GET', '/cdp'],
      ] as const) {
        const r = await api.req(m, `/v1/capsules/${c.id}${p}`, {
          key: bob.key,
          ...(m === 'POST' && p === '/exec' ? { json: { command: 'true' } } : {}),
        });
        envelope(t, r, 404, 'resource_not_found');
      }
      envelope(t, await api.req('GET', `/v1/proofs/${c.id}`, { key: alice.key }), 404, 'resource_not_found');

      const data = Buffer.from('id,name\n1,Zoë\n2,Ann\n');
      const up = await api.req('POST', `/v1/capsules/${c.id}/upload?filename=data.csv`, {
        key: alice.key,
        raw: data,
        headers: { 'content-type': 'application/octet-stream' },
      });
      t.equal(up.status, 200, up.text);
      t.same(up.body, { capsule_id: c.id, filename: 'data.csv', size_bytes: data.length, sha512: sha512(data) });
      envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/upload`, { key: alice.key, raw: data }),
        400,
        'invalid_parameters',
      );
      const trav = envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/upload?filename=../etc/passwd`, { key: alice.key, raw: data }),
        400,
        'invalid_parameters',
      );
      t.match(trav.message, /^filename: /);

      const ex = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
        key: alice.key,
        json: {
          command:
            'wc -l < /data/input/data.csv; cat /data/input/data > /data/output/echo.txt; tr a-z A-Z < /data/input/data.csv > /data/output/upper.csv',
          input_data: 'secret input ✓',
        },
      });
      t.equal(ex.status, 200, ex.text);
      t.equal(ex.body.capsule_id, c.id);
      t.equal(ex.body.exit_code, 0);
      t.equal(ex.body.stdout.trim(), '3');
      t.equal(ex.body.timed_out, false);
      t.type(ex.body.duration_ms, 'number');
      t.match(ex.body.executed_at, /Z$/);
      const ex2 = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
        key: alice.key,
        json: { command: 'echo oops >&2; exit 3' },
      });
      t.equal(ex2.body.exit_code, 3);
      t.equal(ex2.body.stderr.trim(), 'oops');

      const out = await api.req('GET', `/v1/capsules/${c.id}/output`, { key: alice.key });
      t.equal(out.status, 200);
      t.equal(out.body.capsule_id, c.id);
      const names = out.body.files.map((f: any) => f.filename).sort();
      t.same(names, ['echo.txt', 'upper.csv']);
      const dl = await api.req('GET', `/v1/capsules/${c.id}/output/echo.txt`, { key: alice.key });
      t.equal(dl.status, 200);
      t.equal(Buffer.from(dl.bytes).toString('utf8'), 'secret input ✓');
      t.equal(dl.headers.get('x-svc-file-sha512'), sha512(dl.bytes));
      t.match(dl.headers.get('content-type'), /^text\/plain/);
      const dl2 = await api.req('GET', `/v1/capsules/${c.id}/output/upper.csv`, { key: alice.key });
      t.match(dl2.headers.get('content-type'), /^text\/csv/);
      envelope(
        t,
        await api.req('GET', `/v1/capsules/${c.id}/output/missing.txt`, { key: alice.key }),
        404,
        'resource_not_found',
      );

      const st2 = await api.req('GET', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(st2.body.execution_count, 2);
      t.equal(
        st2.body.bytes_processed,
        data.length + Buffer.byteLength('secret input ✓') + dl.bytes.length + dl2.bytes.length,
      );

      const del = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(del.status, 200, del.text);
      const d = del.body;
      t.equal(d.capsule_id, c.id);
      t.equal(d.status, 'destroyed');
      t.equal(d.total_executions, 2);
      t.equal(d.total_bytes_processed, st2.body.bytes_processed);
      t.equal(d.cdp.destroyed_at, d.destroyed_at);
      t.equal(d.cdp.cdp_version, '2.1');
      t.equal(d.cdp.chain.length, 8);
      t.same(d.capsule_context, { jurisdiction: 'EU', data_classification: 'PHI' });
      t.same(d.cdp.termination, { trigger: 'customer_request', command_was_running: false, destruction: 'complete' });
      const v = verifyProof(d.cdp);
      t.equal(v.valid, true, `AuditRecord verifies: ${JSON.stringify(v)}`);
      t.equal(verifyProof(d.audit_proof).valid, true, 'AuditProof projection verifies');
      const cv = cliVerify(del.body);
      t.equal(cv.status, 0, `capsule verify accepts the destroy response: ${cv.out}`);
      t.match(cv.out, /AuditProof verified/);
      t.notOk('activity' in d.audit_proof, 'the shareable projection has no activity trail');
      t.notOk('internal' in d.audit_proof, 'nor internal ids');
      const types = d.cdp.activity.map((e: any) => e.type);
      t.same(types, [
        'CapsuleStarted',
        'FileUploaded',
        'ExecutionStarted',
        'ExecutionCompleted',
        'ExecutionStarted',
        'ExecutionCompleted',
        'FileDownloaded',
        'FileDownloaded',
        'DestructionInitiated',
      ]);
      t.same(
        d.cdp.activity.map((e: any) => e.seq),
        types.map((_: unknown, i: number) => i + 1),
      );
      t.same(d.cdp.activity[0], {
        seq: 1,
        type: 'CapsuleStarted',
        at: d.cdp.activity[0].at,
        data_classification: 'PHI',
        jurisdiction: 'EU',
        region: 'local',
      });
      t.equal(d.cdp.activity[1].sha512, sha512(data));
      t.notMatch(
        JSON.stringify(d.cdp.activity),
        /secret input|Zoë|wc -l/,
        'trail carries hashes, not data or commands',
      );
      t.equal(d.cdp.evidence[6].activity_events, types.length, 'step 7 seals the trail as counted');
      // component_proofs: steps 1-6 measured here, each entry the hash of that step's evidence
      const componentKeys = [
        'namespace_verification',
        'mountinfo_verification',
        'memory_wipe',
        'key_destruction',
        'credential_incineration',
        'merkle_zero_state',
      ];
      t.same(
        Object.keys(d.cdp.component_proofs).sort(),
        [...componentKeys].sort(),
        'every measured step has a component proof',
      );
      componentKeys.forEach((k, i) => {
        t.equal(d.cdp.evidence[i].performed, true, `step ${i + 1} says it measured`);
        t.equal(d.cdp.component_proofs[k], d.cdp.chain[i].evidence_hash, `${k} is step ${i + 1}'s evidence hash`);
      });
      // regulatory_context: related_to only, with the notice, never a status
      t.equal(d.regulatory_context.jurisdiction, 'EU');
      t.match(d.regulatory_context.notice, /not a compliance certification/i);
      t.ok(d.regulatory_context.mappings.length > 0);
      for (const m of d.regulatory_context.mappings)
        for (const f of m.frameworks) t.equal(f.relationship, 'related_to');
      t.notMatch(JSON.stringify(d), /COMPLIANT|PASSED|MEETS/);
      t.same(d.cdp.regulatory_context, d.regulatory_context, 'the mapping is signed inside the proof');

      // After destruction: 409 on a second destroy, 410 for live operations.
      envelope(t, await api.req('DELETE', `/v1/capsules/${c.id}`, { key: alice.key }), 409, 'resource_conflict');
      envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: alice.key, json: { command: 'true' } }),
        410,
        'capsule_expired',
      );
      envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/upload?filename=a`, { key: alice.key, raw: 'x' }),
        410,
        'capsule_expired',
      );
      envelope(t, await api.req('GET', `/v1/capsules/${c.id}/output`, { key: alice.key }), 410, 'capsule_expired');
      const gone = await api.req('GET', `/v1/capsules/${c.id}`, { key: alice.key });
      t.equal(gone.body.status, 'destroyed');
      t.equal(gone.body.destroyed_at, d.destroyed_at);

      // Stored proof, AuditRecord, public AuditProof, presentation, key record, online verify.
      const pr = await api.req('GET', `/v1/proofs/${c.id}`, { key: alice.key });
      t.equal(pr.status, 200);
      t.match(pr.body.proof_id, /^prf_/);
      t.equal(pr.body.verified, true);
      t.same(pr.body.cdp, d.cdp, 'stored proof equals the answered one');
      t.same(pr.body.component_proofs, d.cdp.component_proofs ?? {});
      envelope(t, await api.req('GET', `/v1/proofs/${c.id}`, { key: bob.key }), 404, 'resource_not_found');
      t.same((await api.req('GET', `/v1/capsules/${c.id}/cdp`, { key: alice.key })).body, d.cdp);
      const pub = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify`);
      t.equal(pub.status, 200);
      t.same(pub.body, { ...d.audit_proof, activity: d.cdp.activity }, 'the AuditProof with its activity trail');
      t.equal(verifyProof(pub.body).valid, true);
      const pres = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify?format=presentation`);
      t.equal(pres.status, 200);
      for (const k of ['destruction', 'document_hash', 'verify']) t.ok(k in pres.body, `presentation has ${k}`);
      t.equal(verifyProof(pres.body).valid, false, 'offline verifiers reject the presentation form');
      envelope(t, await api.req('GET', `/v1/capsules/${c.id}/cdp/verify?format=pdf`), 400, 'invalid_parameters');
      const key = await api.req('GET', `/v1/keys/${encodeURIComponent(d.cdp.attestation.key_id)}`);
      t.equal(key.status, 200);
      t.equal(key.body.key_id, d.cdp.attestation.key_id);
      t.equal(key.body.algorithm, 'Ed25519');
      t.equal(`base64:${key.body.public_key}`, d.cdp.attestation.public_key);
      t.match(key.body.key_id, /^svc-verify-\d{8}T\d{12}Z-cap_/);
      const ov = await api.req('POST', '/v1/verify', { json: { cdp: d.audit_proof } });
      t.equal(ov.status, 200);
      t.equal(ov.body.valid, true);
      t.equal(ov.body.checks.step_count, 8);
      t.equal(ov.body.checks.algorithm, 'Ed25519');
      const tampered = structuredClone(d.audit_proof);
      tampered.capsule_context.data_classification = 'general';
      const tv = await api.req('POST', '/v1/verify', { json: { cdp: tampered } });
      t.equal(tv.status, 200);
      t.equal(tv.body.valid, false);
      t.type(tv.body.failure_reason.type, 'string');
      const junk = await api.req('POST', '/v1/verify', { json: { cdp: 'not a proof' } });
      t.equal(junk.body.valid, false);

      const me = await api.req('GET', '/v1/customers/me', { key: alice.key });
      t.equal(me.body.usage.capsules_used_this_month, 1);
      t.equal(me.body.usage.cdps_this_cycle, 1);
    });

    await t.test('bad exec and create input gets the specified error; nothing half-written', async (t) => {
      const c = await create(api, alice.key);
      const url = `/v1/capsules/${c.id}/exec`;
      t.match(
        envelope(
          t,
          await api.req('POST', url, { key: alice.key, json: { command: 'x'.repeat(10 * 1024 + 1) } }),
          413,
          'payload_too_large',
        ).message,
        /^command/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', url, {
            key: alice.key,
            json: { command: 'true', input_data: 'x'.repeat(512 * 1024 + 1) },
          }),
          413,
          'payload_too_large',
        ).message,
        /^input_data/,
      );
      t.match(
        envelope(t, await api.req('POST', url, { key: alice.key, json: {} }), 400, 'invalid_parameters').message,
        /^command: is required/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', url, { key: alice.key, json: { command: 'true', timeout: 'abc' } }),
          400,
          'invalid_parameters',
        ).message,
        /^timeout/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', url, { key: alice.key, json: { command: 'true', sudo: true } }),
          400,
          'invalid_parameters',
        ).message,
        /^sudo: unknown field/,
      );
      for (const bad of ['/etc/passwd', '/data/input/../x', '/data/input/', '/tmp/a/b', '/data/input/..', 'relative'])
        t.match(
          envelope(
            t,
            await api.req('POST', url, {
              key: alice.key,
              json: { command: 'true', input_data: 'x', input_filename: bad },
            }),
            400,
            'invalid_parameters',
          ).message,
          /^input_filename/,
          bad,
        );
      const okPath = await api.req('POST', url, {
        key: alice.key,
        json: { command: 'cat /tmp/in.txt', input_data: 'via tmp', input_filename: '/tmp/in.txt' },
      });
      t.equal(okPath.body.stdout, 'via tmp');
      t.equal(
        (await api.req('GET', `/v1/capsules/${c.id}`, { key: alice.key })).body.execution_count,
        1,
        'refused execs did not count',
      );
      t.match(
        envelope(
          t,
          await api.req('POST', url, {
            key: alice.key,
            raw: '{"command":',
            headers: { 'content-type': 'application/json' },
          }),
          400,
          'invalid_parameters',
        ).message,
        /^body: malformed JSON/,
      );
      envelope(
        t,
        await api.req('POST', url, {
          key: alice.key,
          raw: 'x'.repeat(700 * 1024),
          headers: { 'content-type': 'application/json' },
        }),
        413,
        'payload_too_large',
      );
      const meta = async (m: unknown) =>
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { metadata: m } }),
          400,
          'invalid_parameters',
        ).message as string;
      t.match(await meta({ 'svc:owner': 'x' }), /^metadata\.svc:owner: .*reserved/);
      t.match(
        await meta(Object.fromEntries(Array.from({ length: 17 }, (_, i) => [`k${i}`, 'v']))),
        /^metadata: at most 16 keys/,
      );
      t.match(await meta({ k: 'v'.repeat(257) }), /^metadata\.k: value longer than 256/);
      t.match(await meta({ ['k'.repeat(65)]: 'v' }), /^metadata\.k+: key longer than 64/);
      t.match(await meta({ n: 5 }), /^metadata\.n: value must be a string/);
      t.match(
        await meta(Object.fromEntries(Array.from({ length: 16 }, (_, i) => [`k${i}`, '✓'.repeat(100)]))),
        /^metadata: exceeds 4096 bytes/,
      );
      t.match(await meta('x'), /^metadata/);
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { ttl: -5 } }),
          400,
          'invalid_parameters',
        ).message,
        /^ttl/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { ttl: 60, max_lifetime_seconds: 61 } }),
          400,
          'invalid_parameters',
        ).message,
        /^max_lifetime_seconds/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { data_classification: 'secret' } }),
          400,
          'invalid_parameters',
        ).message,
        /^data_classification/,
      );
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { colour: 'red' } }),
          400,
          'invalid_parameters',
        ).message,
        /^colour: unknown field/,
      );
      envelope(
        t,
        await api.req('POST', '/v1/capsules', { key: alice.key, json: { egress_profile_id: 'egp_1' } }),
        403,
        'tier_required',
      );
      const capped = await create(api, alice.key, { ttl: 86_400 });
      t.equal(capped.ttl_seconds, 300, 'ttl capped at the Free max_ttl_seconds');
      const me = await api.req('GET', '/v1/customers/me', { key: alice.key });
      t.equal(me.body.usage.capsules_used_this_month, 3, 'only the two successful creates (plus the first) counted');
      const list = await api.req('GET', '/v1/capsules?limit=2', { key: alice.key });
      t.equal(list.body.items.length, 2);
      t.type(list.body.next_cursor, 'string');
      const rest = await api.req('GET', `/v1/capsules?limit=2&cursor=${encodeURIComponent(list.body.next_cursor)}`, {
        key: alice.key,
      });
      t.equal(rest.body.items.length, 1);
      t.equal(rest.body.next_cursor, null);
      const ids = [...list.body.items, ...rest.body.items].map((x: any) => x.id);
      t.equal(new Set(ids).size, 3);
      t.ok(ids.includes(c.id) && ids.includes(capped.id));
      for (const id of [c.id, capped.id])
        t.equal((await api.req('DELETE', `/v1/capsules/${id}`, { key: alice.key })).status, 200);
    });

    await t.test('quotas: 3 concurrent capsules on Free, counters exact under concurrency', async (t) => {
      const carol = await api.signup();
      const rs = await Promise.all(
        Array.from({ length: 8 }, () => api.req('POST', '/v1/capsules', { key: carol.key, json: {} })),
      );
      const ok = rs.filter((r) => r.status === 201);
      t.equal(ok.length, 3);
      for (const r of rs.filter((x) => x.status !== 201))
        t.match(envelope(t, r, 402, 'quota_exceeded').message, /concurrent/);
      const me = await api.req('GET', '/v1/customers/me', { key: carol.key });
      t.equal(me.body.usage.capsules_used_this_month, 3);
      await Promise.all(ok.map((r) => api.req('DELETE', `/v1/capsules/${r.body.id}`, { key: carol.key })));
      const me2 = await api.req('GET', '/v1/customers/me', { key: carol.key });
      t.equal(me2.body.usage.cdps_this_cycle, 3);
      t.equal(
        (await api.req('POST', '/v1/capsules', { key: carol.key, json: {} })).status,
        201,
        'slots come back after destroy',
      );
    });

    await t.test('Idempotency-Key replays status, body and headers without a second capsule', async (t) => {
      const dave = await api.signup();
      const h = { 'idempotency-key': 'b1a6c1e2-0000-4000-8000-000000000001' };
      const a = await api.req('POST', '/v1/capsules', { key: dave.key, json: { ttl: 60 }, headers: h });
      const b = await api.req('POST', '/v1/capsules', { key: dave.key, json: { ttl: 60 }, headers: h });
      t.equal(a.status, 201);
      t.equal(b.status, 201);
      t.equal(b.text, a.text, 'same body');
      t.equal(b.headers.get('x-svc-request-id'), a.headers.get('x-svc-request-id'), 'same headers');
      t.equal(b.headers.get('location'), a.headers.get('location'));
      t.equal(b.headers.get('idempotent-replayed'), 'true');
      const conc = await Promise.all(
        Array.from({ length: 5 }, () =>
          api.req('POST', '/v1/capsules', { key: dave.key, json: {}, headers: { 'idempotency-key': 'k-2' } }),
        ),
      );
      t.same(new Set(conc.map((r) => r.body.id)).size, 1, 'concurrent duplicates make one capsule');
      t.ok(conc.every((r) => r.status === 201));
      const other = await api.req('POST', '/v1/capsules', { key: dave.key, json: { ttl: 61 }, headers: h });
      t.match(envelope(t, other, 400, 'invalid_parameters').message, /^Idempotency-Key/);
      const me = await api.req('GET', '/v1/customers/me', { key: dave.key });
      t.equal(me.body.usage.capsules_used_this_month, 2, 'one capsule per key');
      // A replayed error keeps its envelope and request id.
      const e1 = await api.req('POST', '/v1/capsules', {
        key: dave.key,
        json: { bogus: 1 },
        headers: { 'idempotency-key': 'k-3' },
      });
      const e2 = await api.req('POST', '/v1/capsules', {
        key: dave.key,
        json: { bogus: 1 },
        headers: { 'idempotency-key': 'k-3' },
      });
      envelope(t, e2, 400, 'invalid_parameters');
      t.equal(e2.body.error.request_id, e1.body.error.request_id);
      // Keys are per customer: the same key for another customer is independent.
      const eve = await api.signup();
      const x = await api.req('POST', '/v1/capsules', { key: eve.key, json: { ttl: 60 }, headers: h });
      t.not(x.body.id, a.body.id);
    });

    await t.test('session-named variant: older proof form', async (t) => {
      const fred = await api.signup();
      const sres = await api.req('POST', '/v1/sessions', { key: fred.key, json: { data_classification: 'PII' } });
      t.equal(sres.status, 201, sres.text);
      t.match(sres.body.session_id, /^sess_/);
      t.equal(sres.body.status, 'active');
      const id = sres.body.session_id;
      const ex = await api.req('POST', `/v1/sessions/${id}/exec`, {
        key: fred.key,
        json: { command: 'tr a-z A-Z < /data/input/data', input_data: 'abc' },
      });
      t.equal(ex.status, 200, ex.text);
      t.equal(ex.body.output, 'ABC');
      t.equal(ex.body.exit_code, 0);
      t.equal(ex.body.timed_out, false);
      envelope(
        t,
        await api.req('POST', `/v1/sessions/${id}/exec`, { key: bob.key, json: { command: 'true' } }),
        404,
        'resource_not_found',
      );
      const del = await api.req('DELETE', `/v1/sessions/${id}`, { key: fred.key });
      t.equal(del.status, 200, del.text);
      t.equal(del.body.session_id, id);
      t.equal(del.body.status, 'destroyed');
      t.equal(del.body.cdp.cdp_version, '1.0');
      t.equal(del.body.cdp.session_id, id);
      t.match(del.body.cdp.final_hash, /^sha256:[0-9a-f]{64}$/);
      t.notOk('canonical_hash' in del.body.cdp);
      const v = verifyProof(del.body.cdp);
      t.equal(v.valid, true, JSON.stringify(v));
      if (v.valid) t.equal(v.checks.chain_recomputed, false, 'reduced scope');
      t.equal(cliVerify(del.body.cdp).status, 0, 'capsule verify accepts the older form');
      t.equal((await api.req('GET', `/v1/keys/${del.body.cdp.attestation.key_id}`)).status, 200);
      const full = await api.req('GET', `/v1/proofs/${id}`, { key: fred.key });
      t.equal(full.body.cdp.cdp_version, '2.1', 'the full 2.1 record is stored for the session');
      t.equal(verifyProof(full.body.cdp).valid, true);
      envelope(t, await api.req('DELETE', `/v1/sessions/${id}`, { key: fred.key }), 409, 'resource_conflict');
    });
  });

  t.test(`${driver}: timeouts, OOM, destroy during a command, racing destroys, upload bound`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off', CAPSULE_UPLOAD_MAX_BYTES: '1024' });
    t.teardown(s.close);
    const { api } = s;
    const u = await api.signup();
    const c = await create(api, u.key);
    const to = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
      key: u.key,
      json: { command: 'sleep 5', timeout: 1 },
    });
    t.equal(to.status, 200);
    t.equal(to.body.timed_out, true, 'SIGTERM at the exec timeout');
    const oom = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
      key: u.key,
      json: { command: 'python3 -c "a = bytearray(900 * 1024 * 1024)"' },
    });
    t.equal(oom.status, 200);
    t.equal(oom.body.oom_killed, true, `memory bomb OOM-killed: ${oom.text}`);
    t.equal(oom.body.process_limit_killed, false);
    // A loop forking at the process bound is stopped, and says so in the answer and the trail.
    const forks = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
      key: u.key,
      json: {
        command: FORK_LOOP_AT_BOUND,
        timeout: 30,
      },
    });
    t.equal(forks.status, 200);
    t.same(
      [forks.body.process_limit_killed, forks.body.exit_code, forks.body.timed_out, forks.body.oom_killed],
      [true, 137, false, false],
      `fork loop stopped at the process bound: ${forks.text.slice(0, 300)}`,
    );
    t.match(
      envelope(
        t,
        await api.req('POST', `/v1/capsules/${c.id}/upload?filename=big`, { key: u.key, raw: Buffer.alloc(2048) }),
        413,
        'payload_too_large',
      ).message,
      /exceeds 1024 bytes/,
    );
    // Destroy while a command runs.
    const pending = api.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'sleep 20' } });
    await new Promise((r) => setTimeout(r, 400));
    t.equal((await api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body.status, 'executing');
    const [d1, d2] = await Promise.all([
      api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key }),
      new Promise((r) => setTimeout(r, 20)).then(() => api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key })),
    ]);
    t.same([d1.status, d2.status].sort(), [200, 409], 'racing destroys: one proof, one conflict');
    const d = d1.status === 200 ? d1.body : d2.body;
    t.same(d.cdp.termination, {
      trigger: 'customer_request',
      command_was_running: true,
      command_completed: false,
      destruction: 'complete',
    });
    const types = d.cdp.activity.map((e: any) => e.type);
    t.same(types.slice(0, 8), [
      'CapsuleStarted',
      'ExecutionStarted',
      'ExecutionCompleted',
      'ExecutionStarted',
      'ExecutionOomKilled',
      'ExecutionStarted',
      'ExecutionCompleted',
      'ExecutionStarted',
    ]);
    t.equal(d.cdp.activity[6].process_limit_killed, true, 'the trail records the stop at the process bound');
    t.equal(d.cdp.activity[2].process_limit_killed, undefined, 'and nothing on an ordinary completion');
    t.equal(types.at(-1), 'DestructionInitiated', 'DestructionInitiated is last');
    t.equal(verifyProof(d.cdp).valid, true);
    const p = await pending;
    t.not(p.status, 500, `the interrupted exec gets a specified answer: ${p.status}`);
    t.equal((await api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body.status, 'destroyed');
    t.same(await runner.client.list(), []);
  });

  t.test(`${driver}: Free monthly quota: 100 capsules and 100 proofs, then 402; the cycle rolls over`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    // An injected clock at the end of a month, moved by hand below.
    let now = Date.parse('2026-11-30T23:00:00.000Z');
    const clock = { nowMs: () => now, nowIso: () => new Date(now).toISOString().replace(/Z$/, '000Z') };
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' }, undefined, { clock });
    t.teardown(s.close);
    const { api } = s;
    const u = await api.signup();
    let made = 0;
    await Promise.all(
      [0, 1, 2].map(async (w) => {
        for (let i = w; i < 100; i += 3) {
          const c = await create(api, u.key);
          made++;
          const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key });
          if (d.status !== 200) throw new Error(`destroy ${d.status} ${d.text}`);
        }
      }),
    );
    t.equal(made, 100);
    const me = await api.req('GET', '/v1/customers/me', { key: u.key });
    t.equal(me.body.usage.capsules_used_this_month, 100);
    t.equal(me.body.usage.cdps_this_cycle, 100);
    t.equal(me.body.usage.billing_cycle_start, '2026-11-01T00:00:00.000000Z');
    const over = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
    t.match(envelope(t, over, 402, 'quota_exceeded').message, /this month \(100\)/);
    t.equal(
      (await api.req('POST', '/v1/sessions', { key: u.key, json: {} })).status,
      402,
      'the session variant shares the quota',
    );
    now = Date.parse('2026-12-01T00:00:01.000Z');
    const me2 = await api.req('GET', '/v1/customers/me', { key: u.key });
    t.equal(me2.body.usage.capsules_used_this_month, 0, 'new cycle');
    t.equal(me2.body.usage.cdps_this_cycle, 0);
    t.equal(me2.body.usage.billing_cycle_start, '2026-12-01T00:00:00.000000Z');
    const c = await create(api, u.key);
    t.equal((await api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key })).status, 200);
    t.equal((await api.req('GET', '/v1/customers/me', { key: u.key })).body.usage.capsules_used_this_month, 1);
    // Idempotency-Key replays for 24 hours, then the key is forgotten.
    const h = { 'idempotency-key': 'window-test' };
    const a = await api.req('POST', '/v1/capsules', { key: u.key, json: {}, headers: h });
    now += 23 * 3600 * 1000;
    const b = await api.req('POST', '/v1/capsules', { key: u.key, json: {}, headers: h });
    t.equal(b.body.id, a.body.id, 'replayed within 24 h');
    t.equal(b.headers.get('idempotent-replayed'), 'true');
    await api.req('DELETE', `/v1/capsules/${a.body.id}`, { key: u.key });
    now += 2 * 3600 * 1000;
    const c2 = await api.req('POST', '/v1/capsules', { key: u.key, json: {}, headers: h });
    t.equal(c2.status, 201);
    t.not(c2.body.id, a.body.id, 'a new capsule after the window');
    t.equal(c2.headers.get('idempotent-replayed'), null);
  });

  t.test(`${driver}: TTL expiry destroys with a proof (status expired)`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off', CAPSULE_SWEEP_INTERVAL_MS: '100' });
    t.teardown(s.close);
    const u = await s.api.signup();
    const c = await create(s.api, u.key, { ttl: 1 });
    let st: any;
    for (let i = 0; i < 60; i++) {
      st = (await s.api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body;
      if (st.status === 'expired') break;
      await new Promise((r) => setTimeout(r, 100));
    }
    t.equal(st.status, 'expired');
    envelope(
      t,
      await s.api.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'true' } }),
      410,
      'capsule_expired',
    );
    envelope(t, await s.api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key }), 409, 'resource_conflict');
    const p = await s.api.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
    t.equal(p.status, 200);
    t.equal(p.body.cdp.termination.trigger, 'ttl_expired');
    t.equal(p.body.cdp.activity.at(-1).type, 'DestructionInitiated');
    t.equal(verifyProof(p.body.cdp).valid, true);
    t.equal(cliVerify(p.body).status, 0, 'capsule verify accepts the stored proof record');
    t.same(await runner.client.list(), [], 'the runner holds nothing');
  });
}

t.test('postgresql: ready is 503 when the database goes away or is behind the migrations', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('postgresql', runner.client, { CAPSULE_RATE_LIMITS: 'off' });
  t.teardown(s.close);
  const ok = await s.api.req('GET', '/v1/health/ready');
  t.equal(ok.status, 200);
  t.same(ok.body.checks, { database: 'ok', migrations: 'ok', runner: 'ok', recovery: 'ok' });
  // A database behind this code's migrations (another replica rolled back, say) is not ready.
  await dbQuery('postgresql', s.db, 'delete from "schema_migrations" where "name" = ?', [
    'Migration0018IdempotencyTakeover',
  ]);
  const behind = await s.api.req('GET', '/v1/health/ready');
  t.match(envelope(t, behind, 503, 'service_unavailable').message, /migrations pending/);
  await s.db.drop();
  const down = await s.api.req('GET', '/v1/health/ready');
  t.match(envelope(t, down, 503, 'service_unavailable').message, /database unavailable/);
  t.ok(Number(down.headers.get('retry-after')) > 0);
  t.equal((await s.api.req('GET', '/v1/health')).status, 200, 'liveness stays up');
});
