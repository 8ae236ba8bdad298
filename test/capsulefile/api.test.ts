// Capsulefiles over real HTTP on SQLite and PostgreSQL: lifecycle, every
// error path, system Capsulefiles, content hash equal to the CLI's and stable
// across restarts, and capsules pinned to a Capsulefile.
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { CreateCapsuleRequest, ExecRequest, RunnerPort } from '../../shared/runner-protocol.js';
import { contentHash, limits, parseDefinition } from '../../control-plane/capsulefile/index.js';
import { DRIVERS, envelope, freshDb, start, type Api, type T } from '../control-plane/harness.js';

const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const systemDir = fileURLToPath(new URL('../../../policies/system-capsulefiles/', import.meta.url));
const sha = (b: Uint8Array | string): string => `sha512:${createHash('sha512').update(b).digest('hex')}`;
const cliHash = (dir: string): string => {
  const r = spawnSync(process.execPath, [cli, 'capsulefile', 'hash', dir], {
    encoding: 'utf8',
    env: { PATH: process.env['PATH'] ?? '' },
  });
  if (r.status !== 0) throw new Error(r.stderr);
  return r.stdout.trim();
};

/**
 * PLACEHOLDER for the sandbox runner until its client is on this branch: an
 * in-process RunnerPort that records what the control plane asks of it (the
 * requests are what this suite checks) and runs nothing.
 */
function recordingRunner(): RunnerPort & { creates: CreateCapsuleRequest[]; execs: ExecRequest[] } {
  const live = new Set<string>();
  const creates: CreateCapsuleRequest[] = [];
  const execs: ExecRequest[] = [];
  return {
    creates,
    execs,
    hello: async () => ({
      protocol_version: 1,
      host: { kernel: 'test', cgroup_mode: 'v1', swap_active: false, init_on_free: null, bwrap_version: 'test' },
      lost: [],
    }),
    create: async (req) => {
      creates.push(req);
      live.add(req.capsule_id);
      return { capsule_id: req.capsule_id, hostname: 'h', host_uid: 1000, created_at: new Date().toISOString() };
    },
    exec: async (req) => {
      execs.push(req);
      return {
        stdout: '',
        stderr: '',
        stdout_truncated: false,
        stderr_truncated: false,
        exit_code: 0,
        duration_ms: 1,
        executed_at: new Date().toISOString(),
        timed_out: false,
        oom_killed: false,
      };
    },
    upload: async () => {
      throw new Error('not used');
    },
    listOutput: async () => [],
    readOutput: async () => {
      throw new Error('not used');
    },
    destroy: async () => {
      throw new Error('not used');
    },
    list: async () => [...live],
    close: async () => {},
  };
}

async function createCf(t: T, api: Api, key: string, json: unknown): Promise<any> {
  const r = await api.req('POST', '/v1/capsulefiles', { key, json });
  t.equal(r.status, 201, r.text);
  return r.body;
}
const upload = (api: Api, key: string, id: string, filename: string, raw: Uint8Array | string) =>
  api.req('POST', `/v1/capsulefiles/${id}/files?filename=${encodeURIComponent(filename)}`, {
    key,
    raw,
    headers: { 'content-type': 'application/octet-stream' },
  });

for (const driver of DRIVERS) {
  t.test(`${driver}: Capsulefiles`, async (t) => {
    const runner = recordingRunner();
    const db = await freshDb(driver);
    t.teardown(() => db.drop());
    let s = await start(driver, runner, { CAPSULE_RATE_LIMITS: 'off' }, db);
    t.teardown(() => s.close());
    const alice = await s.api.signup();
    const bob = await s.api.signup();
    const def = {
      name: 'scrubber',
      runtime: 'python3',
      entrypoint: 'python3 /capsule/app/main.py',
      data_classification: 'PHI',
      egress_declaration: ['api.example.com', '10.0.0.0/8'],
      default_ttl: 600,
      memory_mb: 512,
      env_vars: { MODE: 'strict' },
      packages: { apt: ['python3'] },
      mcp_policy: { allowed_tools: ['search'] },
    };
    const main = Buffer.from('print("hi")\n');
    const util = Buffer.from([0, 1, 2, 255]);
    let cfId = '';
    let finalHash = '';

    await t.test('create, update, add files, finalize; the hash equals the CLI hash of the same sources', async (t) => {
      const api = s.api;
      const c = await createCf(t, api, alice.key, def);
      t.match(c.id, /^cf_[0-9a-f]+$/);
      t.same(Object.keys(c).sort(), ['content_hash', 'created_at', 'id', 'name', 'status']);
      t.equal(c.status, 'draft');
      t.equal(c.content_hash, null);
      cfId = c.id;
      envelope(t, await api.req('POST', '/v1/capsulefiles', { key: alice.key, json: def }), 409, 'resource_conflict');
      t.equal(
        (await api.req('POST', '/v1/capsulefiles', { key: bob.key, json: def })).status,
        201,
        'names are unique per account only',
      );

      let r = await api.req('PATCH', `/v1/capsulefiles/${cfId}`, {
        key: alice.key,
        json: { memory_mb: 300, mcp_policy: null },
      });
      t.equal(r.status, 200, r.text);
      t.equal(r.body.memory_mb, 300);
      t.equal(r.body.mcp_policy, null, 'null removes an optional field');
      r = await api.req('PATCH', `/v1/capsulefiles/${cfId}`, {
        key: alice.key,
        json: { memory_mb: 512, mcp_policy: def.mcp_policy },
      });
      t.equal(r.status, 200);
      t.match(
        envelope(
          t,
          await api.req('PATCH', `/v1/capsulefiles/${cfId}`, { key: alice.key, json: { colour: 'red' } }),
          400,
          'invalid_parameters',
        ).message,
        /^colour: unknown field/,
      );
      t.match(
        envelope(
          t,
          await api.req('PATCH', `/v1/capsulefiles/${cfId}`, { key: alice.key, json: { name: null } }),
          400,
          'invalid_parameters',
        ).message,
        /^name: /,
      );
      t.match(
        envelope(
          t,
          await api.req('PATCH', `/v1/capsulefiles/${cfId}`, {
            key: alice.key,
            json: { egress_declaration: ['10.0.0.1/8'] },
          }),
          400,
          'invalid_parameters',
        ).message,
        /^egress_declaration\.0: .*host bits/,
      );

      r = await upload(api, alice.key, cfId, 'main.py', 'stale');
      t.equal(r.status, 200, r.text);
      r = await upload(api, alice.key, cfId, 'main.py', main);
      t.same(
        r.body,
        { capsulefile_id: cfId, filename: 'main.py', size_bytes: main.length, sha512: sha(main) },
        'same name replaces in a draft',
      );
      r = await upload(api, alice.key, cfId, 'util.bin', util);
      t.equal(r.status, 200);

      // Bad uploads: a clear 400 naming the field, and nothing stored.
      for (const bad of ['../etc/passwd', '/etc/passwd', 'a//b', 'lib/x.py', '..', 'a\\b']) {
        t.match(
          envelope(t, await upload(api, alice.key, cfId, bad, 'x'), 400, 'invalid_parameters').message,
          /^filename: /,
          bad,
        );
      }
      t.match(
        envelope(t, await upload(api, alice.key, cfId, 'empty.py', ''), 400, 'invalid_parameters').message,
        /^body: file is empty/,
      );
      t.match(
        envelope(
          t,
          await upload(api, alice.key, cfId, 'big.bin', Buffer.alloc(limits.FILE_MAX_BYTES + 1)),
          400,
          'invalid_parameters',
        ).message,
        /^body: file is larger than/,
      );
      envelope(
        t,
        await api.req('POST', `/v1/capsulefiles/${cfId}/files`, { key: alice.key, raw: 'x' }),
        400,
        'invalid_parameters',
      );

      const d = await api.req('GET', `/v1/capsulefiles/${cfId}`, { key: alice.key });
      t.equal(d.status, 200);
      t.same(
        d.body.files,
        [
          { filename: 'main.py', size_bytes: main.length, sha512: sha(main) },
          { filename: 'util.bin', size_bytes: util.length, sha512: sha(util) },
        ],
        'only the good files are stored',
      );
      t.equal(d.body.runtime, 'python3');
      t.equal(d.body.is_system, false);
      t.equal(d.body.tls_ocsp_check, null);

      const f = await api.req('POST', `/v1/capsulefiles/${cfId}/finalize`, { key: alice.key });
      t.equal(f.status, 200, f.text);
      t.equal(f.body.status, 'finalized');
      t.equal(f.body.file_count, 2);
      t.equal(f.body.size_bytes, main.length + util.length);
      t.match(f.body.finalized_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
      finalHash = f.body.content_hash;
      t.equal(
        finalHash,
        contentHash(parseDefinition(def), [
          { filename: 'main.py', size_bytes: main.length, sha512: sha(main) },
          { filename: 'util.bin', size_bytes: util.length, sha512: sha(util) },
        ]),
        'the library hash',
      );

      const dir = mkdtempSync(join(tmpdir(), 'cf-api-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(join(dir, 'main.py'), main);
      writeFileSync(join(dir, 'util.bin'), util);
      writeFileSync(
        join(dir, 'Capsulefile.yaml'),
        [
          'name: scrubber',
          'runtime: python3',
          'entrypoint: python3 /capsule/app/main.py',
          'data_classification: PHI',
          'egress_declaration: [api.example.com, 10.0.0.0/8]',
          'default_ttl: 600',
          'memory_mb: 512',
          'env_vars: {MODE: strict}',
          'packages: {apt: [python3]}',
          'mcp_policy: {allowed_tools: [search]}',
          'files: [main.py, util.bin]',
          '',
        ].join('\n'),
      );
      t.equal(cliHash(dir), finalHash, 'capsule capsulefile hash DIR recomputes it from the source directory');
    });

    await t.test('finalized is immutable: every change attempt is 409', async (t) => {
      const api = s.api;
      envelope(
        t,
        await api.req('PATCH', `/v1/capsulefiles/${cfId}`, { key: alice.key, json: { memory_mb: 64 } }),
        409,
        'resource_conflict',
      );
      envelope(t, await upload(api, alice.key, cfId, 'more.py', 'x'), 409, 'resource_conflict');
      envelope(
        t,
        await api.req('POST', `/v1/capsulefiles/${cfId}/finalize`, { key: alice.key }),
        409,
        'resource_conflict',
      );
      const d = await api.req('GET', `/v1/capsulefiles/${cfId}`, { key: alice.key });
      t.equal(d.body.content_hash, finalHash);
      t.equal(d.body.files.length, 2);
    });

    await t.test('another account sees none of it', async (t) => {
      const api = s.api;
      for (const [m, p] of [
        ['GET', ''],
        ['PATCH', ''],
        ['DELETE', ''],
        ['POST', '/finalize'],
        ['POST', '/files?filename=x'],
      ] as const) {
        envelope(
          t,
          await api.req(m, `/v1/capsulefiles/${cfId}${p}`, {
            key: bob.key,
            ...(m === 'PATCH' ? { json: {} } : p.startsWith('/files') ? { raw: 'x' } : {}),
          }),
          404,
          'resource_not_found',
        );
      }
      envelope(t, await api.req('GET', '/v1/capsulefiles/cf_nope', { key: alice.key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/capsulefiles', {}), 401, 'invalid_api_key');
    });

    await t.test('bad create bodies: 400 naming the field, nothing stored', async (t) => {
      const api = s.api;
      const before = (await api.req('GET', '/v1/capsulefiles?limit=100', { key: alice.key })).body.items.length;
      const cases: [unknown, RegExp][] = [
        [{ runtime: 'x', entrypoint: 'x' }, /^name: is required/],
        [{ ...def, name: 'other', colour: 'red' }, /^colour: unknown field/],
        [{ ...def, name: 'other', env_vars: { '1X': 'a' } }, /^env_vars\.1X: /],
        [{ ...def, name: 'other', egress_declaration: ['https://x.example'] }, /^egress_declaration\.0: /],
        [
          { ...def, name: 'other', mcp_policy: { allowed_tools: ['a'], prohibited_tools: ['a'] } },
          /^mcp_policy\.prohibited_tools: /,
        ],
        [
          { ...def, name: 'other', tls_pinned_certs: [{ host: 'a.example', cert_sha256: 'xyz' }] },
          /^tls_pinned_certs\.0\.cert_sha256: /,
        ],
        [
          { ...def, name: 'other', signing_config: { endpoint: 'http://insecure.example' } },
          /^signing_config\.endpoint: /,
        ],
      ];
      for (const [body, why] of cases)
        t.match(
          envelope(
            t,
            await api.req('POST', '/v1/capsulefiles', { key: alice.key, json: body }),
            400,
            'invalid_parameters',
          ).message,
          why,
        );
      envelope(
        t,
        await api.req('POST', '/v1/capsulefiles', {
          key: alice.key,
          raw: '{"name":',
          headers: { 'content-type': 'application/json' },
        }),
        400,
        'invalid_parameters',
      );
      t.equal((await api.req('GET', '/v1/capsulefiles?limit=100', { key: alice.key })).body.items.length, before);
      // The API-only TLS fields are accepted here (and hashed), unlike in YAML.
      const tls = await createCf(t, api, alice.key, {
        ...def,
        name: 'with-tls',
        tls_pinned_certs: [{ host: 'api.example.com', cert_sha256: 'a'.repeat(64) }],
        tls_ocsp_check: true,
      });
      t.equal((await api.req('GET', `/v1/capsulefiles/${tls.id}`, { key: alice.key })).body.tls_ocsp_check, true);
      t.equal(
        (await api.req('DELETE', `/v1/capsulefiles/${tls.id}`, { key: alice.key })).status,
        204,
        'a draft can be deleted',
      );
      envelope(t, await api.req('GET', `/v1/capsulefiles/${tls.id}`, { key: alice.key }), 404, 'resource_not_found');
    });

    await t.test('system Capsulefiles: listed for everyone, read-only, hash = CLI hash of policies/', async (t) => {
      const api = s.api;
      const seen: any[] = [];
      let cursor: string | null = null;
      do {
        const r: any = await api.req(
          'GET',
          `/v1/capsulefiles?limit=1${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
          { key: bob.key },
        );
        t.equal(r.status, 200);
        t.ok(r.body.items.length <= 1);
        seen.push(...r.body.items);
        cursor = r.body.next_cursor;
      } while (cursor);
      t.same(Object.keys(seen[0]).sort(), ['content_hash', 'id', 'is_system', 'name', 'status']);
      t.notOk(
        seen.some((i) => i.id === cfId),
        "alice's Capsulefile is not in bob's list",
      );
      const system = seen.filter((i) => i.is_system);
      t.same(system.map((i) => i.name).sort(), ['system-node-batch', 'system-python3-batch']);
      t.equal(new Set(seen.map((i) => i.id)).size, seen.length, 'cursor paging repeats nothing');
      for (const sys of system) {
        const dir = join(systemDir, sys.name.replace(/^system-/, ''));
        t.equal(sys.content_hash, cliHash(dir), `${sys.name} hash`);
        t.equal(sys.status, 'finalized');
        for (const who of [alice, bob])
          t.equal((await api.req('GET', `/v1/capsulefiles/${sys.id}`, { key: who.key })).status, 200);
        envelope(
          t,
          await api.req('PATCH', `/v1/capsulefiles/${sys.id}`, { key: alice.key, json: { memory_mb: 64 } }),
          409,
          'resource_conflict',
        );
        envelope(t, await upload(api, alice.key, sys.id, 'x.py', 'x'), 409, 'resource_conflict');
        envelope(
          t,
          await api.req('POST', `/v1/capsulefiles/${sys.id}/finalize`, { key: alice.key }),
          409,
          'resource_conflict',
        );
        envelope(
          t,
          await api.req('DELETE', `/v1/capsulefiles/${sys.id}`, { key: alice.key }),
          409,
          'resource_conflict',
        );
      }
      envelope(t, await api.req('GET', '/v1/capsulefiles?cursor=bogus', { key: bob.key }), 400, 'invalid_parameters');
      envelope(t, await api.req('GET', '/v1/capsulefiles?limit=0', { key: bob.key }), 400, 'invalid_parameters');
    });

    await t.test('pinned capsules', async (t) => {
      const api = s.api;
      const draft = await createCf(t, api, alice.key, { ...def, name: 'still-draft' });
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: alice.key, json: { capsulefile_id: draft.id } }),
          400,
          'invalid_parameters',
        ).message,
        /^capsulefile_id: .*draft/,
      );
      envelope(
        t,
        await api.req('POST', '/v1/capsules', { key: bob.key, json: { capsulefile_id: cfId } }),
        404,
        'resource_not_found',
      );
      t.equal(runner.creates.length, 0, 'nothing reached the runner');

      // A package the base image lacks is refused when the Capsulefile is written (test/capsulefile/packages.test.ts).
      t.match(
        envelope(
          t,
          await api.req('POST', '/v1/capsulefiles', {
            key: alice.key,
            json: { ...def, name: 'needs-missing', packages: { apt: ['python3', 'surely-not-installed-pkg-xyz'] } },
          }),
          400,
          'invalid_parameters',
        ).message,
        /^packages: .*apt:surely-not-installed-pkg-xyz/,
      );

      const r = await api.req('POST', '/v1/capsules', { key: alice.key, json: { capsulefile_id: cfId } });
      t.equal(r.status, 201, r.text);
      t.equal(r.body.capsulefile_id, cfId);
      t.equal(r.body.data_classification, 'PHI', 'the Capsulefile default applies');
      t.equal(r.body.ttl_seconds, 300, 'default_ttl 600 capped by the Free tier (300)');
      const req = runner.creates.at(-1);
      t.equal(req?.memory_mb, 256, 'memory_mb 512 capped by the Free ceiling (policies/capsulefile-tier-limits.yaml)');
      t.same(req?.env, { MODE: 'strict' });
      t.same(
        req?.app_files?.map((f) => [f.filename, Buffer.from(f.content_b64, 'base64').toString('hex')]),
        [
          ['main.py', main.toString('hex')],
          ['util.bin', util.toString('hex')],
        ],
        'files go to /capsule/app with their bytes',
      );
      const events = await s.cp.store.activity(r.body.id);
      t.match(events[0], {
        type: 'CapsuleStarted',
        capsulefile_id: cfId,
        capsulefile_content_hash: finalHash,
        data_classification: 'PHI',
      });

      const ex = await api.req('POST', `/v1/capsules/${r.body.id}/exec`, { key: alice.key, json: {} });
      t.equal(ex.status, 200, ex.text);
      t.equal(runner.execs.at(-1)?.command, def.entrypoint, 'exec without command runs the entrypoint');
      t.equal(runner.execs.at(-1)?.cwd, '/capsule/app', 'next to its files');
      await api.req('POST', `/v1/capsules/${r.body.id}/exec`, { key: alice.key, json: { command: 'echo other' } });
      t.equal(runner.execs.at(-1)?.command, 'echo other');
      t.equal(runner.execs.at(-1)?.cwd, undefined, 'a command runs in the default /data');

      const own = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
      t.match(
        envelope(
          t,
          await api.req('POST', `/v1/capsules/${own.body.id}/exec`, { key: alice.key, json: {} }),
          400,
          'invalid_parameters',
        ).message,
        /^command: /,
      );

      const withTtl = await api.req('POST', '/v1/capsules', {
        key: alice.key,
        json: { capsulefile_id: cfId, ttl: 60, data_classification: 'general' },
      });
      t.equal(withTtl.body.ttl_seconds, 60, 'the request ttl wins over default_ttl');
      t.equal(withTtl.body.data_classification, 'general');

      envelope(t, await api.req('DELETE', `/v1/capsulefiles/${cfId}`, { key: alice.key }), 409, 'resource_conflict');
      t.equal((await api.req('GET', `/v1/capsulefiles/${cfId}`, { key: alice.key })).status, 200, 'still there');
    });

    await t.test('uploads racing a finalize: the hash covers exactly the stored files', async (t) => {
      const api = s.api;
      const c = await createCf(t, api, alice.key, { ...def, name: 'racer' });
      t.equal((await upload(api, alice.key, c.id, 'first.txt', 'first')).status, 200);
      const ups = Array.from({ length: 8 }, (_, i) => upload(api, alice.key, c.id, `f${i}.txt`, `file ${i}`));
      const fin = api.req('POST', `/v1/capsulefiles/${c.id}/finalize`, { key: alice.key });
      const results = await Promise.all([...ups, fin]);
      const f = results.at(-1)!;
      t.equal(f.status, 200, f.text);
      for (const r of results.slice(0, -1)) t.ok(r.status === 200 || r.status === 409, `upload answered ${r.status}`);
      const d = await api.req('GET', `/v1/capsulefiles/${c.id}`, { key: alice.key });
      const accepted = results
        .slice(0, -1)
        .filter((r) => r.status === 200)
        .map((r) => r.body.filename as string);
      t.same(
        d.body.files.map((x: { filename: string }) => x.filename).sort(),
        ['first.txt', ...accepted].sort(),
        'an accepted upload is in the file set',
      );
      t.equal(f.body.file_count, d.body.files.length);
      t.equal(
        f.body.content_hash,
        contentHash(parseDefinition({ ...def, name: 'racer' }), d.body.files),
        'the hash is over exactly that set',
      );
    });

    await t.test('Idempotency-Key replays a create without a second Capsulefile', async (t) => {
      const api = s.api;
      const headers = { 'idempotency-key': `idem-${Date.now()}` };
      const a = await api.req('POST', '/v1/capsulefiles', { key: alice.key, json: { ...def, name: 'idem' }, headers });
      const b = await api.req('POST', '/v1/capsulefiles', { key: alice.key, json: { ...def, name: 'idem' }, headers });
      t.equal(a.status, 201);
      t.equal(b.status, 201);
      t.equal(b.body.id, a.body.id);
      t.equal(b.headers.get('idempotent-replayed'), 'true');
    });

    await t.test('capsule capsulefile push against the service', async (t) => {
      const dir = mkdtempSync(join(tmpdir(), 'cf-push-'));
      t.teardown(() => rmSync(dir, { recursive: true, force: true }));
      writeFileSync(
        join(dir, 'Capsulefile.yaml'),
        'name: pushed\nruntime: sh\nentrypoint: sh /capsule/app/run.sh\nfiles: [run.sh]\n',
      );
      writeFileSync(join(dir, 'run.sh'), 'echo pushed\n');
      const local = cliHash(dir);
      const r = await new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
        const p = spawn(process.execPath, [cli, 'capsulefile', 'push', dir], {
          env: { PATH: process.env['PATH'] ?? '', CAPSULE_API_URL: s.cp.url, CAPSULE_API_KEY: alice.key },
        });
        let out = '';
        let err = '';
        p.stdout.on('data', (b: Buffer) => (out += b.toString()));
        p.stderr.on('data', (b: Buffer) => (err += b.toString()));
        p.on('close', (code) => resolve({ code, out, err }));
      });
      t.equal(r.code, 0, r.err);
      const [id, hash] = r.out.trim().split(' ');
      t.equal(hash, local, 'push prints the hash the CLI computes locally');
      const d = await s.api.req('GET', `/v1/capsulefiles/${id}`, { key: alice.key });
      t.equal(d.body.status, 'finalized');
      t.equal(d.body.content_hash, local);
      const again = await new Promise<{ code: number | null; err: string }>((resolve) => {
        const p = spawn(
          process.execPath,
          [cli, 'capsulefile', 'push', dir, '--api-url', s.cp.url, '--api-key', alice.key],
          { env: { PATH: process.env['PATH'] ?? '' } },
        );
        let err = '';
        p.stderr.on('data', (b: Buffer) => (err += b.toString()));
        p.on('close', (code) => resolve({ code, err }));
      });
      t.equal(again.code, 1);
      t.match(
        again.err,
        /^capsule capsulefile push: POST \/v1\/capsulefiles: 409 resource_conflict: name: /,
        'a duplicate name is one line',
      );
    });

    await t.test('Capsulefile count quota per tier (402), concurrent creates included', async (t) => {
      const api = s.api;
      const carol = await api.signup();
      const made = await Promise.all(
        Array.from({ length: 12 }, (_, i) =>
          api.req('POST', '/v1/capsulefiles', { key: carol.key, json: { ...def, name: `q${i}` } }),
        ),
      );
      t.equal(made.filter((r) => r.status === 201).length, 10, 'Free holds 10 (policies/capsulefile-tier-limits.yaml)');
      for (const r of made.filter((x) => x.status !== 201))
        t.match(envelope(t, r, 402, 'quota_exceeded').message, /Capsulefiles \(10\)/);
      const one = made.find((r) => r.status === 201)!;
      t.equal((await api.req('DELETE', `/v1/capsulefiles/${one.body.id}`, { key: carol.key })).status, 204);
      t.equal(
        (await api.req('POST', '/v1/capsulefiles', { key: carol.key, json: { ...def, name: 'after-delete' } })).status,
        201,
        'a deletion frees a slot',
      );
    });

    await t.test('restart: content hashes stable, system Capsulefiles not duplicated', async (t) => {
      const before = (await s.api.req('GET', '/v1/capsulefiles?limit=100', { key: alice.key })).body.items;
      await s.close();
      s = await start(driver, recordingRunner(), { CAPSULE_RATE_LIMITS: 'off' }, db);
      const after = (await s.api.req('GET', '/v1/capsulefiles?limit=100', { key: alice.key })).body.items;
      t.same(after, before);
      t.equal((await s.api.req('GET', `/v1/capsulefiles/${cfId}`, { key: alice.key })).body.content_hash, finalHash);
    });
  });
}
