// API keys and TOTP MFA over real HTTP on SQLite and PostgreSQL: issue, list,
// revoke (refused on the very next request, also by a second control-plane
// process on the same database), rotation grace on an injected clock, the
// operator's rotate-key, MFA enrollment/activation/verification with codes
// computed by otplib, replay and wrong-code limits, and the MFA gate.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { generate } from 'otplib';
import { isoMicros } from '../../shared/time.js';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { dbQuery, DRIVERS, envelope, start, type Api } from './harness.js';
import { ManualClock } from '../helpers/clock.js';

const noRunner = new RunnerClient(join(tmpdir(), `cp-no-runner-keys-${process.pid}.sock`));
const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

/** A clock the test moves by hand. */

/** The TOTP code of `secret` at the clock's time (plus `steps` periods). */
const totp = (secret: string, clock: ManualClock, steps = 0): Promise<string> =>
  generate({ secret, epoch: Math.floor(clock.ms / 1000) + steps * 30 });

const query = dbQuery;

const me = (api: Api, key: string) => api.req('GET', '/v1/customers/me', { key });

for (const driver of DRIVERS) {
  t.test(`${driver}: API keys`, async (t) => {
    const clock = new ManualClock();
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' }, undefined, { clock });
    t.teardown(s.close);
    // A second control-plane process on the same database, same clock.
    const s2 = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' }, s.db, { clock });
    t.teardown(s2.close);
    const { api } = s;

    await t.test('list shows the signup key by id and prefix, never the key or its hash', async (t) => {
      const u = await api.signup();
      const r = await api.req('GET', '/v1/api-keys', { key: u.key });
      t.equal(r.status, 200, r.text);
      t.equal(r.body.items.length, 1);
      const k = r.body.items[0];
      t.match(k.id, /^key_[0-9a-f]{24}$/);
      t.equal(k.prefix, u.key.slice(0, 12));
      t.equal(k.mode, 'live');
      t.equal(k.revoked_at, null);
      t.match(k.last_used_at, /^\d{4}-\d\d-\d\dT/, 'last_used_at set by use');
      t.same(Object.keys(k).sort(), ['created_at', 'id', 'last_used_at', 'mode', 'prefix', 'revoked_at']);
      t.notMatch(r.text, new RegExp(u.key.slice(12)), 'no key material');
      t.equal(r.body.next_cursor, null);
      const rows = await query(driver, s.db, 'select "key_hash" from "api_keys" where "id" = ?', [k.id]);
      t.match(rows[0].key_hash, /^[0-9a-f]{64}$/, 'stored as SHA-256 only');
      t.notMatch(r.text, new RegExp(rows[0].key_hash), 'hash not listed');
    });

    await t.test(
      'issue live and test keys; a revoked key is refused on its next request in both processes',
      async (t) => {
        const u = await api.signup();
        const live = await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'live' } });
        t.equal(live.status, 201, live.text);
        t.match(live.body.key, /^svc_live_[0-9a-f]{32}$/);
        t.equal(live.body.prefix, live.body.key.slice(0, 12));
        t.match(live.body.warning, /shown once/);
        const test = await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } });
        t.match(test.body.key, /^svc_test_[0-9a-f]{32}$/);
        t.equal(test.body.mode, 'test');
        const dflt = await api.req('POST', '/v1/api-keys', { key: u.key, json: {} });
        t.equal(dflt.body.mode, 'live', 'mode defaults to live');
        // The test key is the same account on the same surface.
        t.equal((await me(api, test.body.key)).body.customer_id, u.customer_id);
        // Warm both processes with the key, then revoke through the first.
        t.equal((await me(api, live.body.key)).status, 200);
        t.equal((await me(s2.api, live.body.key)).status, 200);
        const del = await api.req('DELETE', `/v1/api-keys/${live.body.id}`, { key: u.key });
        t.equal(del.status, 200, del.text);
        t.equal(del.body.id, live.body.id);
        t.equal(del.body.revoked_at, clock.nowIso());
        envelope(t, await me(api, live.body.key), 401, 'invalid_api_key');
        envelope(t, await me(s2.api, live.body.key), 401, 'invalid_api_key');
        const listed = (await api.req('GET', '/v1/api-keys', { key: u.key })).body.items;
        t.equal(listed.length, 4);
        t.equal(listed.find((k: any) => k.id === live.body.id).revoked_at, clock.nowIso());
        envelope(t, await api.req('DELETE', `/v1/api-keys/${live.body.id}`, { key: u.key }), 409, 'resource_conflict');
        // Bad input and other accounts' keys.
        const bad = await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'sandbox' } });
        t.match(envelope(t, bad, 400, 'invalid_parameters').message, /^mode/);
        envelope(t, await api.req('DELETE', '/v1/api-keys/key_000000', { key: u.key }), 404, 'resource_not_found');
        const other = await api.signup();
        envelope(
          t,
          await api.req('DELETE', `/v1/api-keys/${test.body.id}`, { key: other.key }),
          404,
          'resource_not_found',
        );
        t.equal((await me(api, test.body.key)).status, 200, 'untouched by the other account');
      },
    );

    await t.test('the last live key cannot be revoked; test keys do not count', async (t) => {
      const u = await api.signup();
      const own = (await api.req('GET', '/v1/api-keys', { key: u.key })).body.items[0];
      const test = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body;
      const e = envelope(
        t,
        await api.req('DELETE', `/v1/api-keys/${own.id}`, { key: u.key }),
        409,
        'resource_conflict',
      );
      t.match(e.message, /last live API key/);
      t.equal((await api.req('DELETE', `/v1/api-keys/${test.id}`, { key: u.key })).status, 200);
      // Concurrent revocations of the two live keys, through two processes: exactly one succeeds.
      const second = (await api.req('POST', '/v1/api-keys', { key: u.key, json: {} })).body;
      const caller = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body.key;
      const both = await Promise.all([
        api.req('DELETE', `/v1/api-keys/${own.id}`, { key: caller }),
        s2.api.req('DELETE', `/v1/api-keys/${second.id}`, { key: caller }),
      ]);
      t.same(both.map((r) => r.status).sort(), [200, 409], 'one live key always remains');
    });

    await t.test(
      'rotation: the successor works at once, the old key until the grace ends (injected clock)',
      async (t) => {
        const u = await api.signup();
        const old = (await api.req('GET', '/v1/api-keys', { key: u.key })).body.items[0];
        const rot = await api.req('POST', `/v1/api-keys/${old.id}/rotate`, {
          key: u.key,
          json: { grace_seconds: 600 },
        });
        t.equal(rot.status, 201, rot.text);
        t.match(rot.body.key, /^svc_live_/);
        t.not(rot.body.id, old.id);
        t.equal(rot.body.replaces.id, old.id);
        t.equal(rot.body.replaces.revoked_at, isoMicros(clock.ms + 600_000));
        t.equal((await me(api, rot.body.key)).status, 200, 'successor works');
        clock.advance(599_000);
        t.equal((await me(api, u.key)).status, 200, 'old key inside its grace');
        t.equal((await me(s2.api, u.key)).status, 200, 'in the other process too');
        clock.advance(1_000);
        envelope(t, await me(api, u.key), 401, 'invalid_api_key');
        envelope(t, await me(s2.api, u.key), 401, 'invalid_api_key');
        t.equal((await me(api, rot.body.key)).status, 200);
        // Rotating again the rotated key: refused. grace_seconds bounds.
        envelope(
          t,
          await api.req('POST', `/v1/api-keys/${old.id}/rotate`, { key: rot.body.key, json: {} }),
          409,
          'resource_conflict',
        );
        for (const g of [-1, 86401, 1.5, '60']) {
          const r = await api.req('POST', `/v1/api-keys/${rot.body.id}/rotate`, {
            key: rot.body.key,
            json: { grace_seconds: g },
          });
          t.match(envelope(t, r, 400, 'invalid_parameters').message, /^grace_seconds/, String(g));
        }
        // Default grace 0: the old key ends now; the 24 h maximum is accepted.
        const now = await api.req('POST', `/v1/api-keys/${rot.body.id}/rotate`, { key: rot.body.key, json: {} });
        envelope(t, await me(api, rot.body.key), 401, 'invalid_api_key');
        const max = await api.req('POST', `/v1/api-keys/${now.body.id}/rotate`, {
          key: now.body.key,
          json: { grace_seconds: 86400 },
        });
        t.equal(max.status, 201);
        clock.advance(86_400_000);
        envelope(t, await me(api, now.body.key), 401, 'invalid_api_key');
        t.equal((await me(api, max.body.key)).status, 200);
      },
    );

    await t.test('at most 20 active keys', async (t) => {
      const u = await api.signup();
      for (let i = 0; i < 19; i++)
        t.equal((await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).status, 201);
      envelope(t, await api.req('POST', '/v1/api-keys', { key: u.key, json: {} }), 409, 'resource_conflict');
      const page = await api.req('GET', '/v1/api-keys?limit=15', { key: u.key });
      t.equal(page.body.items.length, 15);
      const rest = await api.req('GET', `/v1/api-keys?limit=15&cursor=${encodeURIComponent(page.body.next_cursor)}`, {
        key: u.key,
      });
      t.equal(rest.body.items.length, 5);
      t.equal(rest.body.next_cursor, null);
      t.equal(new Set([...page.body.items, ...rest.body.items].map((k: any) => k.id)).size, 20);
    });

    await t.test('capsule admin rotate-key prints a new key and revokes the others', async (t) => {
      const u = await api.signup();
      const extra = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body;
      const r = spawnSync(process.execPath, [CLI, 'admin', 'rotate-key', '--email', u.email.toUpperCase()], {
        encoding: 'utf8',
        env: { ...process.env, DATABASE_URL: s.db.url },
      });
      t.equal(r.status, 0, r.stderr);
      const key = r.stdout.trim();
      t.match(key, /^svc_live_[0-9a-f]{32}$/);
      t.match(r.stderr, /every other key revoked/);
      envelope(t, await me(api, u.key), 401, 'invalid_api_key');
      envelope(t, await me(s2.api, extra.key), 401, 'invalid_api_key');
      t.equal((await me(api, key)).body.customer_id, u.customer_id);
      const none = spawnSync(process.execPath, [CLI, 'admin', 'rotate-key', '--email', 'nobody@x.io'], {
        encoding: 'utf8',
        env: { ...process.env, DATABASE_URL: s.db.url },
      });
      t.equal(none.status, 1);
      t.match(none.stderr, /no account/);
      const usage = spawnSync(process.execPath, [CLI, 'admin', 'rotate-key'], { encoding: 'utf8' });
      t.equal(usage.status, 2);
      t.notMatch(none.stderr + usage.stderr, /\n\s+at /);
    });
  });

  t.test(`${driver}: MFA`, async (t) => {
    const clock = new ManualClock();
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off' }, undefined, { clock });
    t.teardown(s.close);
    const { api } = s;

    await t.test('enroll, activate, verify for 15 minutes, replay refused, gate on key writes', async (t) => {
      const u = await api.signup();
      // Free without MFA: key writes need nothing.
      t.equal((await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).status, 201);
      t.same((await api.req('GET', '/v1/mfa', { key: u.key })).body.status, 'none');
      const en = await api.req('POST', '/v1/mfa/enroll', { key: u.key });
      t.equal(en.status, 201, en.text);
      t.match(en.body.secret, /^[A-Z2-7]{32}$/, '160-bit base32 secret');
      const url = new URL(en.body.otpauth_url);
      t.equal(url.protocol, 'otpauth:');
      t.equal(url.host, 'totp');
      t.equal(url.searchParams.get('secret'), en.body.secret);
      t.equal(url.searchParams.get('issuer'), 'Capsule');
      t.match(decodeURIComponent(url.pathname), u.email);
      t.equal(en.body.recovery_codes.length, 10);
      t.equal(new Set(en.body.recovery_codes).size, 10);
      for (const c of en.body.recovery_codes) t.match(c, /^[a-z2-7]{5}-[a-z2-7]{5}$/);
      // At rest: the secret sealed under the master key, the codes as hashes.
      const rows = await query(
        driver,
        s.db,
        'select "secret_sealed", "state" from "mfa_factors" where "customer_id" = ?',
        [u.customer_id],
      );
      t.match(rows[0].secret_sealed, /^env1\./);
      t.notMatch(rows[0].secret_sealed, en.body.secret);
      const codes = await query(driver, s.db, 'select "code_hash" from "mfa_recovery_codes" where "customer_id" = ?', [
        u.customer_id,
      ]);
      t.equal(codes.length, 10);
      for (const c of codes) t.notOk(en.body.recovery_codes.some((rc: string) => c.code_hash.includes(rc.slice(0, 5))));
      // Pending: verify is refused, activation with a wrong code is refused.
      envelope(
        t,
        await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code: '000000' } }),
        409,
        'resource_conflict',
      );
      const wrong = await api.req('POST', '/v1/mfa/activate', {
        key: u.key,
        json: { code: '123456' === (await totp(en.body.secret, clock)) ? '654321' : '123456' },
      });
      t.match(envelope(t, wrong, 400, 'invalid_parameters').message, /^code/);
      const act = await api.req('POST', '/v1/mfa/activate', {
        key: u.key,
        json: { code: await totp(en.body.secret, clock) },
      });
      t.equal(act.status, 200, act.text);
      t.equal(act.body.status, 'active');
      t.equal(act.body.verified_until, isoMicros(clock.ms + 15 * 60_000));
      t.equal((await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).status, 201, 'verified');
      envelope(t, await api.req('POST', '/v1/mfa/enroll', { key: u.key }), 409, 'resource_conflict');

      clock.advance(15 * 60_000);
      const gated = await api.req('POST', '/v1/api-keys', { key: u.key, json: {} });
      envelope(t, gated, 403, 'mfa_required');
      t.equal(gated.body.error.type, 'mfa_required');
      const k = (await api.req('GET', '/v1/api-keys', { key: u.key })).body.items[0];
      envelope(t, await api.req('DELETE', `/v1/api-keys/${k.id}`, { key: u.key }), 403, 'mfa_required');
      envelope(t, await api.req('POST', `/v1/api-keys/${k.id}/rotate`, { key: u.key, json: {} }), 403, 'mfa_required');
      envelope(t, await api.req('DELETE', '/v1/mfa', { key: u.key }), 403, 'mfa_required');
      t.equal((await api.req('GET', '/v1/api-keys', { key: u.key })).status, 200, 'reads are not gated');

      const code = await totp(en.body.secret, clock);
      const v = await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code } });
      t.equal(v.status, 200, v.text);
      t.same(v.body, {
        verified: true,
        method: 'totp',
        verified_until: isoMicros(clock.ms + 15 * 60_000),
        recovery_codes_remaining: 10,
      });
      const replay = await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code } });
      t.match(envelope(t, replay, 400, 'invalid_parameters').message, /already used/);
      // A code of the previous step (inside the drift window) is refused once a later one was used.
      const prev = await totp(en.body.secret, clock, -1);
      envelope(
        t,
        await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code: prev } }),
        400,
        'invalid_parameters',
      );
      t.equal((await api.req('POST', '/v1/api-keys', { key: u.key, json: {} })).status, 201, 'gate passes');

      // Verification belongs to the key that verified: another key of the account is gated.
      const other = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body;
      envelope(t, await api.req('POST', '/v1/api-keys', { key: other.key, json: {} }), 403, 'mfa_required');
      const st = await api.req('GET', '/v1/mfa', { key: u.key });
      t.equal(st.body.status, 'active');
      t.equal(st.body.recovery_codes_remaining, 10);
      t.equal(st.body.verified_until, isoMicros(clock.ms + 15 * 60_000));

      // A recovery code works once, on the other key.
      const rc = en.body.recovery_codes[3];
      const byCode = await api.req('POST', '/v1/mfa/verify', { key: other.key, json: { code: rc.toUpperCase() } });
      t.equal(byCode.status, 200, byCode.text);
      t.equal(byCode.body.method, 'recovery_code');
      t.equal(byCode.body.recovery_codes_remaining, 9);
      envelope(
        t,
        await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code: rc } }),
        400,
        'invalid_parameters',
      );
      t.equal((await api.req('POST', '/v1/api-keys', { key: other.key, json: { mode: 'test' } })).status, 201);

      // Removal needs a recent verification (the verified key has it), then everything is free again.
      t.equal((await api.req('DELETE', '/v1/mfa', { key: u.key })).status, 204);
      t.equal((await api.req('GET', '/v1/mfa', { key: u.key })).body.status, 'none');
      envelope(t, await api.req('DELETE', '/v1/mfa', { key: u.key }), 404, 'resource_not_found');
      const gone = await query(
        driver,
        s.db,
        'select count(*) as "n" from "mfa_recovery_codes" where "customer_id" = ?',
        [u.customer_id],
      );
      t.equal(Number(gone[0].n), 0);
    });

    await t.test('wrong codes are rate limited per account; the window ends on time', async (t) => {
      const u = await api.signup();
      const en = (await api.req('POST', '/v1/mfa/enroll', { key: u.key })).body;
      const good = await totp(en.secret, clock);
      const bad = good === '111111' ? '222222' : '111111';
      for (let i = 0; i < 5; i++)
        envelope(
          t,
          await api.req('POST', '/v1/mfa/activate', { key: u.key, json: { code: bad } }),
          400,
          'invalid_parameters',
        );
      const limited = await api.req('POST', '/v1/mfa/activate', { key: u.key, json: { code: good } });
      const e = envelope(t, limited, 429, 'rate_limited');
      t.ok(e.retry_after > 0 && e.retry_after <= 900, `retry_after ${e.retry_after}`);
      t.equal(limited.headers.get('retry-after'), String(e.retry_after));
      // Concurrent guesses cannot exceed the budget either.
      clock.advance(15 * 60_000);
      const burst = await Promise.all(
        Array.from({ length: 12 }, () => api.req('POST', '/v1/mfa/activate', { key: u.key, json: { code: bad } })),
      );
      t.equal(burst.filter((r) => r.status === 400).length, 5, 'five attempts in the window');
      t.equal(burst.filter((r) => r.status === 429).length, 7);
      clock.advance(15 * 60_000);
      const ok = await api.req('POST', '/v1/mfa/activate', {
        key: u.key,
        json: { code: await totp(en.secret, clock) },
      });
      t.equal(ok.status, 200, ok.text);
    });

    await t.test('paid tier without MFA: mfa_enrollment_required; pending enrollment is not enough', async (t) => {
      const u = await api.signup();
      await query(driver, s.db, `update "accounts" set "tier" = 'business' where "customer_id" = ?`, [u.customer_id]);
      const r = await api.req('POST', '/v1/api-keys', { key: u.key, json: {} });
      envelope(t, r, 403, 'mfa_enrollment_required');
      t.equal(r.body.error.type, 'mfa_enrollment_required');
      const en = (await api.req('POST', '/v1/mfa/enroll', { key: u.key })).body;
      envelope(t, await api.req('POST', '/v1/api-keys', { key: u.key, json: {} }), 403, 'mfa_enrollment_required');
      t.equal(
        (await api.req('POST', '/v1/mfa/activate', { key: u.key, json: { code: await totp(en.secret, clock) } }))
          .status,
        200,
      );
      t.equal((await api.req('POST', '/v1/api-keys', { key: u.key, json: {} })).status, 201);
      // Unknown fields and malformed codes name the field.
      const extra = await api.req('POST', '/v1/mfa/verify', { key: u.key, json: { code: '1', otp: '2' } });
      t.match(envelope(t, extra, 400, 'invalid_parameters').message, /^otp: unknown field/);
      const empty = await api.req('POST', '/v1/mfa/verify', { key: u.key, json: {} });
      t.match(envelope(t, empty, 400, 'invalid_parameters').message, /^code: is required/);
    });
  });
}
