// Accounts, auth, the error envelope, bad input and per-IP / per-customer
// limits over real HTTP, on SQLite and PostgreSQL. These paths need no runner.
import t from 'tap';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { DRIVERS, envelope, start } from './harness.js';

// The real runner client pointed at a socket nobody listens on: the runner is down.
const noRunner = new RunnerClient(join(tmpdir(), `cp-no-runner-${process.pid}.sock`));

for (const driver of DRIVERS) {
  t.test(`${driver}: accounts, auth and errors`, async (t) => {
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const { api } = s;

    await t.test('signup returns the key once, hashed at rest, with Free limits', async (t) => {
      const r = await api.req('POST', '/v1/signup', { json: { email: 'Alice@Example.com', jurisdiction: 'US' } });
      t.equal(r.status, 201);
      t.match(r.body.api_key, /^svc_live_[0-9a-f]{32}$/);
      t.match(r.body.customer_id, /^cus_/);
      t.equal(r.body.email, 'alice@example.com');
      t.equal(r.body.tier, 'free');
      t.equal(r.body.jurisdiction, 'US');
      t.same(r.body.limits, {
        capsules_per_month: 100,
        max_ttl_seconds: 300,
        max_lifetime_seconds: 300,
        concurrent_capsules: 3,
        rate_limit_rpm: 20,
        upload_max_bytes: 16 * 1024 * 1024,
      });
      t.match(r.body.warning, /shown once/);
      t.match(r.headers.get('x-svc-request-id'), /^req_[0-9a-f]{24}$/);
      t.match(r.headers.get('x-svc-request-id'), /^req_/);
      const me = await api.req('GET', '/v1/customers/me', { key: r.body.api_key });
      t.equal(me.status, 200);
      t.equal(me.body.customer_id, r.body.customer_id);
      t.same(me.body.usage.capsules_used_this_month, 0);
      t.same(me.body.usage.cdps_this_cycle, 0);
      t.equal(me.body.usage.cdp_limit, 100);
      t.match(me.body.usage.billing_cycle_start, /^\d{4}-\d{2}-01T00:00:00\.000000Z$/);
      t.notOk('api_key' in me.body, 'the key is never shown again');
      envelope(
        t,
        await api.req('POST', '/v1/signup', { json: { email: 'alice@example.com', jurisdiction: 'EU' } }),
        409,
        'resource_conflict',
      );
    });

    await t.test('auth: missing, malformed, unknown and wrong-scheme keys are 401', async (t) => {
      envelope(t, await api.req('GET', '/v1/customers/me'), 401, 'invalid_api_key');
      envelope(t, await api.req('GET', '/v1/customers/me', { key: 'svc_live_xyz' }), 401, 'invalid_api_key');
      envelope(
        t,
        await api.req('GET', '/v1/customers/me', { key: `svc_live_${'0'.repeat(32)}` }),
        401,
        'invalid_api_key',
      );
      envelope(
        t,
        await api.req('GET', '/v1/customers/me', { headers: { authorization: `Basic ${'a'.repeat(20)}` } }),
        401,
        'invalid_api_key',
      );
      envelope(
        t,
        await api.req('GET', '/v1/capsules/cap_00', { key: `svc_test_${'a'.repeat(32)}` }),
        401,
        'invalid_api_key',
      );
    });

    await t.test('bad input: each answer names the field, nothing is written', async (t) => {
      const bad: [unknown, string, RegExp][] = [
        [{ email: 'x@y.z' }, 'invalid_parameters', /^jurisdiction: is required/],
        [{ email: 'not-an-email', jurisdiction: 'EU' }, 'invalid_parameters', /^email: /],
        [{ email: 42, jurisdiction: 'EU' }, 'invalid_parameters', /^email: /],
        [{ email: 'x@y.z', jurisdiction: 'MARS' }, 'invalid_parameters', /^jurisdiction: /],
        [{ email: 'x@y.z', jurisdiction: 'EU', tier: 'enterprise' }, 'invalid_parameters', /^tier: unknown field/],
        [[1, 2], 'invalid_parameters', /^body: must be a JSON object/],
      ];
      for (const [json, code, msg] of bad) {
        const e = envelope(t, await api.req('POST', '/v1/signup', { json }), 400, code);
        t.match(e.message, msg, JSON.stringify(json));
      }
      const m = envelope(
        t,
        await api.req('POST', '/v1/signup', {
          raw: '{"email": "a@b.c",',
          headers: { 'content-type': 'application/json' },
        }),
        400,
        'invalid_parameters',
      );
      t.match(m.message, /^body: malformed JSON/);
      const big = JSON.stringify({ email: 'a@b.c', jurisdiction: 'EU', pad: 'x'.repeat(700 * 1024) });
      envelope(
        t,
        await api.req('POST', '/v1/signup', { raw: big, headers: { 'content-type': 'application/json' } }),
        413,
        'payload_too_large',
      );
      const ct = envelope(
        t,
        await api.req('POST', '/v1/signup', {
          raw: 'email=a',
          headers: { 'content-type': 'application/x-www-form-urlencoded' },
        }),
        400,
        'invalid_parameters',
      );
      t.match(ct.message, /^Content-Type/);
      // None of those created an account: this signup of x@y.z is the first.
      t.equal((await api.req('POST', '/v1/signup', { json: { email: 'x@y.z', jurisdiction: 'EU' } })).status, 201);
    });

    await t.test('unknown endpoints and ids: 404 envelope; trace id is echoed', async (t) => {
      const { key } = await api.signup();
      envelope(t, await api.req('GET', '/v1/nope'), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/capsules/cap_doesnotexist', { key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', `/v1/capsules/${'x'.repeat(500)}`, { key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/proofs/cap_doesnotexist', { key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/capsules/cap_doesnotexist/cdp', { key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/capsules/cap_doesnotexist/cdp/verify'), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/keys/svc-verify-nope'), 404, 'resource_not_found');
      const tr = await api.req('GET', '/v1/health', { headers: { 'x-svc-trace-id': 'trace-123' } });
      t.equal(tr.headers.get('x-svc-trace-id'), 'trace-123');
      const lst = await api.req('GET', '/v1/capsules?limit=0', { key });
      t.match(envelope(t, lst, 400, 'invalid_parameters').message, /^limit:/);
      const cur = await api.req('GET', '/v1/capsules?cursor=garbage', { key });
      t.match(envelope(t, cur, 400, 'invalid_parameters').message, /^cursor:/);
      const empty = await api.req('GET', '/v1/capsules', { key });
      t.same(empty.body, { items: [], next_cursor: null });
    });

    await t.test('health is up; ready and capsule calls are 503 while the runner is down', async (t) => {
      const h = await api.req('GET', '/v1/health');
      t.equal(h.status, 200);
      t.equal(h.body.status, 'healthy');
      t.type(h.body.version, 'string');
      const r = envelope(t, await api.req('GET', '/v1/health/ready'), 503, 'service_unavailable');
      t.ok(Number(r.retry_after) > 0);
      t.ok(Number(h.headers.get('retry-after') ?? 1) > 0);
      const { key } = await api.signup();
      const c = await api.req('POST', '/v1/capsules', { key, json: {} });
      envelope(t, c, 503, 'service_unavailable');
      t.ok(Number(c.headers.get('retry-after')) > 0, 'Retry-After on 503');
      const me = await api.req('GET', '/v1/customers/me', { key });
      t.equal(me.body.usage.capsules_used_this_month, 0, 'a refused create counts nothing');
    });

    await t.test('contact stores the message', async (t) => {
      const r = await api.req('POST', '/v1/contact', {
        json: { email: 'c@d.ef', name: 'Zoë', company: 'Ünïcode GmbH', message: 'hello ✓', source: 'web' },
      });
      t.equal(r.status, 200);
      t.same(r.body, { status: 'received' });
      envelope(t, await api.req('POST', '/v1/contact', { json: { email: 'c@d.ef' } }), 400, 'invalid_parameters');
    });

    await t.test('verify: missing cdp is 400', async (t) => {
      const e = envelope(t, await api.req('POST', '/v1/verify', { json: {} }), 400, 'invalid_parameters');
      t.match(e.message, /^cdp: is required/);
    });
  });

  t.test(`${driver}: per-IP and per-customer rate limits`, async (t) => {
    const s = await start(driver, noRunner);
    t.teardown(s.close);
    const { api } = s;
    // signup: 10 per minute per IP (one used below by the customer's signup)
    const { key } = await api.signup();
    for (let i = 0; i < 9; i++)
      t.equal((await api.req('POST', '/v1/signup', { json: { email: `r${i}@x.io`, jurisdiction: 'EU' } })).status, 201);
    const over = await api.req('POST', '/v1/signup', { json: { email: 'late@x.io', jurisdiction: 'EU' } });
    const e = envelope(t, over, 429, 'rate_limited');
    t.ok(e.retry_after >= 1 && e.retry_after <= 60, 'retry_after in seconds');
    t.equal(over.headers.get('retry-after'), String(e.retry_after), 'Retry-After header equals retry_after');
    // contact: 5 per minute per IP
    for (let i = 0; i < 5; i++)
      t.equal((await api.req('POST', '/v1/contact', { json: { email: 'c@d.ef', message: 'm' } })).status, 200);
    envelope(t, await api.req('POST', '/v1/contact', { json: { email: 'c@d.ef', message: 'm' } }), 429, 'rate_limited');
    // verify: 60 per minute per IP
    for (let i = 0; i < 60; i++) await api.req('POST', '/v1/verify', { json: {} });
    envelope(t, await api.req('POST', '/v1/verify', { json: {} }), 429, 'rate_limited');
    // cdp/verify: 30 per minute per IP
    for (let i = 0; i < 30; i++) await api.req('GET', '/v1/capsules/cap_x/cdp/verify');
    envelope(t, await api.req('GET', '/v1/capsules/cap_x/cdp/verify'), 429, 'rate_limited');
    // Free tier: 20 requests a minute per customer, concurrent requests counted exactly
    const rs = await Promise.all(Array.from({ length: 25 }, () => api.req('GET', '/v1/customers/me', { key })));
    t.equal(rs.filter((r) => r.status === 200).length, 20);
    t.equal(rs.filter((r) => r.status === 429).length, 5);
    const limited = rs.find((r) => r.status === 429);
    if (limited) envelope(t, limited, 429, 'rate_limited');
  });

  t.test(`${driver}: rate limits can be turned off (benchmarks only)`, async (t) => {
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    for (let i = 0; i < 12; i++)
      t.equal(
        (await s.api.req('POST', '/v1/signup', { json: { email: `n${i}@x.io`, jurisdiction: 'EU' } })).status,
        201,
      );
  });
}

for (const driver of DRIVERS) {
  t.test(`${driver}: capsule admin set-tier acts on the configured database`, async (t) => {
    const { spawnSync } = await import('node:child_process');
    const { fileURLToPath } = await import('node:url');
    const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
    const s = await start(driver, noRunner);
    t.teardown(s.close);
    const { key, email } = await s.api.signup();
    const admin = (...args: string[]) =>
      spawnSync(process.execPath, [cli, 'admin', ...args], {
        encoding: 'utf8',
        env: { ...process.env, DATABASE_URL: s.db.url },
      });
    const ok = admin('set-tier', '--email', email.toUpperCase(), '--tier', 'team');
    t.equal(ok.status, 0, ok.stderr);
    t.match(ok.stdout, /tier business/);
    const me = await s.api.req('GET', '/v1/customers/me', { key });
    t.equal(me.body.tier, 'business', 'external name team is wire name business');
    t.equal(me.body.usage.cdp_limit, null, 'paid tiers: cdp_limit null');
    t.equal(me.body.limits.max_ttl_seconds, 14400, 'limits from the configured tier table');
    const dev = admin('set-tier', `--email=${email}`, '--tier=developer');
    t.equal(dev.status, 0);
    t.equal((await s.api.req('GET', '/v1/customers/me', { key })).body.tier, 'starter');
    const bad = admin('set-tier', '--email', email, '--tier', 'platinum');
    t.equal(bad.status, 1);
    t.match(bad.stderr, /unknown tier "platinum"/);
    const none = admin('set-tier', '--email', 'nobody@x.io', '--tier', 'free');
    t.equal(none.status, 1);
    t.match(none.stderr, /no account/);
    const usage = admin('set-tier', '--email', email);
    t.equal(usage.status, 2);
    t.notMatch(bad.stderr + none.stderr + usage.stderr, /\n\s+at /, 'no stack traces');
  });
}

t.test('capsule serve: bad options exit 2; a separate runner socket that is down gives ready 503', async (t) => {
  const { spawn, spawnSync } = await import('node:child_process');
  const { mkdtempSync } = await import('node:fs');
  const { fileURLToPath } = await import('node:url');
  const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
  for (const args of [['--bogus'], ['--port', 'abc'], ['--data-dir']]) {
    const r = spawnSync(process.execPath, [cli, 'serve', ...args], { encoding: 'utf8' });
    t.equal(r.status, 2, `serve ${args.join(' ')}`);
    t.match(r.stderr, /capsule serve: /);
    t.notMatch(r.stderr, /\n\s+at /);
  }
  const help = spawnSync(process.execPath, [cli, 'serve', '--help'], { encoding: 'utf8' });
  t.equal(help.status, 0);
  t.match(help.stdout, /--runner-socket/);
  const bad = spawnSync(process.execPath, [cli, 'serve', '--port', '0'], {
    encoding: 'utf8',
    env: { ...process.env, DATABASE_URL: 'mysql://x' },
  });
  t.equal(bad.status, 2);
  t.match(bad.stderr, /DATABASE_URL/);

  const dataDir = mkdtempSync(join(tmpdir(), 'cp-serve-sock-'));
  const { rmSync } = await import('node:fs');
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const child = spawn(
    process.execPath,
    [cli, 'serve', '--port', '0', '--data-dir', dataDir, '--runner-socket', join(dataDir, 'absent.sock')],
    {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LOG_LEVEL: 'silent' },
    },
  );
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    child.once('exit', (c) => reject(new Error(`exited ${c}`)));
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /listening on (\S+)/.exec(out);
      if (m?.[1]) resolve(m[1]);
    });
  });
  const { Api } = await import('./harness.js');
  const api = new Api(url);
  t.equal((await api.req('GET', '/v1/health')).status, 200);
  envelope(t, await api.req('GET', '/v1/health/ready'), 503, 'service_unavailable');
  const { key } = await api.signup();
  envelope(t, await api.req('POST', '/v1/capsules', { key, json: {} }), 503, 'service_unavailable');
  const exited = new Promise<number | null>((r) => child.once('exit', (c) => r(c)));
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'SIGTERM stops it cleanly');
});
