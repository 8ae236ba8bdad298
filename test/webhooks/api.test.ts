// Webhook endpoints, signed deliveries to a real HTTPS receiver on loopback
// (test CA trusted through CAPSULE_WEBHOOK_EXTRA_CA), the fixed retry schedule
// walked on an injected clock into the dead-letter queue, Enterprise replay
// and admin, SSRF refusals, and secrets kept out of logs and listings; on
// SQLite and PostgreSQL, each suite on a fresh database.
import t from 'tap';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generate } from 'otplib';
import { pino } from 'pino';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { dbQuery, DRIVERS, envelope, start, type Api, type Started } from '../control-plane/harness.js';
import { startReceiver, type Receiver } from './receiver.js';
import { ManualClock } from '../helpers/clock.js';

const noRunner = new RunnerClient(join(tmpdir(), `cp-no-runner-wh-${process.pid}.sock`));

const SCHEDULE_MS = [60_000, 300_000, 1_800_000, 7_200_000, 36_000_000];

/** Enrolls, activates and verifies TOTP MFA for the key (the gate of webhook writes and admin routes). */
async function mfa(api: Api, key: string, clock: ManualClock): Promise<(clock: ManualClock) => Promise<void>> {
  const en = await api.req('POST', '/v1/mfa/enroll', { key });
  if (en.status !== 201 && en.status !== 200) throw new Error(`enroll: ${en.status} ${en.text}`);
  const secret = en.body.secret as string;
  const code = (c: ManualClock): Promise<string> => generate({ secret, epoch: Math.floor(c.ms / 1000) });
  const act = await api.req('POST', '/v1/mfa/activate', { key, json: { code: await code(clock) } });
  if (act.status !== 200) throw new Error(`activate: ${act.status} ${act.text}`);
  const verify = async (c: ManualClock): Promise<void> => {
    c.advance(31_000); // a later TOTP step than the last accepted one
    const v = await api.req('POST', '/v1/mfa/verify', { key, json: { code: await code(c) } });
    if (v.status !== 200) throw new Error(`verify: ${v.status} ${v.text}`);
  };
  await verify(clock);
  return verify;
}

async function waitUntil(pred: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!(await pred())) {
    if (Date.now() > end) throw new Error(`condition not met in ${ms} ms`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

for (const driver of DRIVERS) {
  t.test(`${driver}: webhooks`, async (t) => {
    const rx: Receiver = await startReceiver();
    t.teardown(() => rx.close());
    const clock = new ManualClock();
    rx.nowS = () => Math.floor(clock.ms / 1000);
    const logs: string[] = [];
    const logger = pino({ level: 'debug' }, { write: (s: string) => void logs.push(s) });
    const s: Started = await start(
      driver,
      noRunner,
      {
        CAPSULE_RATE_LIMITS: 'off',
        CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
        CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile,
        CAPSULE_WEBHOOK_POLL_MS: '20',
        CAPSULE_WEBHOOK_TIMEOUT_MS: '2000',
      },
      undefined,
      { clock, logger },
    );
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup();
    const bob = await api.signup();
    const secrets: string[] = [];

    const create = async (key: string, json: unknown): Promise<any> => {
      clock.advance(1); // distinct created_at, so newest-first order is defined
      const r = await api.req('POST', '/v1/webhooks', { key, json });
      if (r.status !== 201) throw new Error(`create webhook: ${r.status} ${r.text}`);
      secrets.push(r.body.signing_secret);
      return r.body;
    };

    await t.test('create, read, list, update, delete; owner-only; the secret is shown once', async (t) => {
      const r = await api.req('POST', '/v1/webhooks', {
        key: alice.key,
        json: { url: `${rx.base}/a`, events: ['cdp.generated', 'capsule.failed'], description: 'pipeline' },
      });
      t.equal(r.status, 201, r.text);
      t.match(r.body.id, /^whse_[0-9a-f]{24}$/);
      t.match(r.body.signing_secret, /^whsec_[0-9a-f]{64}$/, 'whsec_ + 32 random bytes');
      t.same(r.body.events, ['cdp.generated', 'capsule.failed']);
      t.equal(r.body.url, `${rx.base}/a`);
      t.equal(r.body.active, true);
      t.match(r.body.created_at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      secrets.push(r.body.signing_secret);
      const id = r.body.id;
      // No idempotent replay of a response that holds the secret: nothing stored for the key.
      const idem = await api.req('POST', '/v1/webhooks', {
        key: bob.key,
        json: { url: `${rx.base}/idem`, events: ['webhook.test'] },
        headers: { 'idempotency-key': 'wh-create-1' },
      });
      t.equal(idem.status, 201);
      secrets.push(idem.body.signing_secret);
      const stored = await dbQuery(
        driver,
        s.db,
        'select count(*) as "n" from "idempotency_keys" where "idem_key" = ?',
        ['wh-create-1'],
      );
      t.equal(Number(stored[0].n), 0, 'the create response (with its secret) is not stored for replay');
      await api.req('DELETE', `/v1/webhooks/${idem.body.id}`, { key: bob.key });
      const rows = await dbQuery(driver, s.db, 'select "secret_sealed" from "webhook_endpoints" where "id" = ?', [id]);
      t.match(rows[0].secret_sealed, /^env1\.[0-9a-f]{16}\./, 'sealed with the envelope module');
      t.notOk(String(rows[0].secret_sealed).includes(r.body.signing_secret.slice(6)), 'not stored in the clear');

      const one = await api.req('GET', `/v1/webhooks/${id}`, { key: alice.key });
      t.equal(one.status, 200);
      t.notOk('signing_secret' in one.body, 'never shown again');
      t.equal(one.body.description, 'pipeline');
      const list = await api.req('GET', '/v1/webhooks', { key: alice.key });
      t.equal(list.status, 200);
      t.equal(list.body.items.length, 1);
      t.notOk(list.text.includes('whsec_'), 'no secret in the list');
      envelope(t, await api.req('GET', `/v1/webhooks/${id}`, { key: bob.key }), 404, 'resource_not_found');
      envelope(t, await api.req('PUT', `/v1/webhooks/${id}`, { key: bob.key, json: {} }), 404, 'resource_not_found');
      envelope(t, await api.req('DELETE', `/v1/webhooks/${id}`, { key: bob.key }), 404, 'resource_not_found');
      envelope(t, await api.req('POST', `/v1/webhooks/${id}/test`, { key: bob.key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', `/v1/webhooks/${id}/deliveries`, { key: bob.key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/webhooks/whse_nope', { key: alice.key }), 404, 'resource_not_found');
      envelope(t, await api.req('GET', '/v1/webhooks'), 401, 'invalid_api_key');

      const up = await api.req('PUT', `/v1/webhooks/${id}`, {
        key: alice.key,
        json: { events: ['webhook.test'], active: false, description: 'paused' },
      });
      t.equal(up.status, 200, up.text);
      t.same(up.body.events, ['webhook.test']);
      t.equal(up.body.active, false);
      t.equal(up.body.url, `${rx.base}/a`, 'unchanged field kept');
      t.notOk('signing_secret' in up.body);

      // Paging: newest first, cursor round trip.
      clock.advance(1);
      const more = [await create(alice.key, { url: `${rx.base}/b`, events: ['webhook.test'] })];
      more.push(await create(alice.key, { url: `${rx.base}/c`, events: ['webhook.test'] }));
      const p1 = await api.req('GET', '/v1/webhooks?limit=2', { key: alice.key });
      t.same(
        p1.body.items.map((x: any) => x.id),
        [more[1].id, more[0].id],
      );
      t.type(p1.body.next_cursor, 'string');
      const p2 = await api.req('GET', `/v1/webhooks?limit=2&cursor=${encodeURIComponent(p1.body.next_cursor)}`, {
        key: alice.key,
      });
      t.same(
        p2.body.items.map((x: any) => x.id),
        [id],
      );
      t.equal(p2.body.next_cursor, null);
      envelope(t, await api.req('GET', '/v1/webhooks?cursor=zzz', { key: alice.key }), 400, 'invalid_parameters');

      t.equal((await api.req('DELETE', `/v1/webhooks/${id}`, { key: alice.key })).status, 204);
      envelope(t, await api.req('GET', `/v1/webhooks/${id}`, { key: alice.key }), 404, 'resource_not_found');
      for (const m of more) await api.req('DELETE', `/v1/webhooks/${m.id}`, { key: alice.key });
    });

    await t.test('bad input names the field and writes nothing', async (t) => {
      const cases: [unknown, string][] = [
        [{ events: ['webhook.test'] }, 'url'],
        [{ url: `${rx.base}/x` }, 'events'],
        [{ url: `${rx.base}/x`, events: [] }, 'events'],
        [{ url: `${rx.base}/x`, events: 'cdp.generated' }, 'events'],
        [{ url: `${rx.base}/x`, events: ['cdp.generated', 'cdp.nope'] }, 'events[1]'],
        [{ url: `${rx.base}/x`, events: [42] }, 'events[0]'],
        [{ url: 'ftp://example.com/x', events: ['webhook.test'] }, 'url'],
        [{ url: 'not a url', events: ['webhook.test'] }, 'url'],
        [{ url: 42, events: ['webhook.test'] }, 'url'],
        [{ url: 'https://user:pw@example.com/', events: ['webhook.test'] }, 'url'],
        [{ url: `https://example.com/${'a'.repeat(2100)}`, events: ['webhook.test'] }, 'url'],
        [{ url: 'https://example.com/', events: ['webhook.test'], description: 7 }, 'description'],
        [{ url: 'https://example.com/', events: ['webhook.test'], secret: 'mine' }, 'secret'],
      ];
      for (const [json, field] of cases) {
        const e = envelope(
          t,
          await api.req('POST', '/v1/webhooks', { key: alice.key, json }),
          400,
          'invalid_parameters',
        );
        t.equal(e.field, field, `field ${field}`);
        t.match(e.message, new RegExp(`^${field.replace(/[[\]]/g, '\\$&')}: `));
      }
      const w = await create(alice.key, { url: `${rx.base}/x`, events: ['webhook.test'] });
      const e = envelope(
        t,
        await api.req('PUT', `/v1/webhooks/${w.id}`, { key: alice.key, json: { active: 'yes' } }),
        400,
        'invalid_parameters',
      );
      t.equal(e.field, 'active');
      envelope(
        t,
        await api.req('PUT', `/v1/webhooks/${w.id}`, { key: alice.key, json: { events: ['x'] } }),
        400,
        'invalid_parameters',
      );
      t.equal((await api.req('GET', `/v1/webhooks/${w.id}`, { key: alice.key })).body.events[0], 'webhook.test');
      const n = await dbQuery(driver, s.db, 'select count(*) as "n" from "webhook_endpoints" where "customer_id" = ?', [
        alice.customer_id,
      ]);
      t.equal(Number(n[0].n), 1, 'only the valid endpoint exists');
      await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: alice.key });
    });

    await t.test('test event: signed delivery over real TLS, verified from the contract', async (t) => {
      const w = await create(alice.key, { url: `${rx.base}/ok`, events: ['webhook.test'] });
      rx.secrets.set('/ok', w.signing_secret);
      const r = await api.req('POST', `/v1/webhooks/${w.id}/test`, { key: alice.key });
      t.equal(r.status, 200, r.text);
      t.equal(r.body.status, 'succeeded');
      t.equal(r.body.attempt_number, 1);
      t.equal(r.body.response_status, 200);
      t.equal(r.body.response_body, 'ok');
      t.type(r.body.duration_ms, 'number');
      t.equal(r.body.next_attempt_at, null);
      const got = rx.received.filter((x) => x.path === '/ok');
      t.equal(got.length, 1);
      t.equal(got[0]!.verified, true, 'signature verifies with the contract recipe');
      t.equal(got[0]!.id, r.body.event_id, 'Svc-Webhook-Id is the event id');
      t.match(got[0]!.id, /^evt_[0-9a-f]+$/);
      t.same(Object.keys(got[0]!.body), ['id', 'type', 'created_at', 'data']);
      t.equal(got[0]!.body.type, 'webhook.test');
      t.equal(got[0]!.body.data.webhook_id, w.id);
      t.match(got[0]!.signature, /^t=\d+,v1=[0-9a-f]{64}$/);
      t.notOk(
        (await import('./receiver.js')).verifyFromContract(got[0]!.signature, 'whsec_wrong', got[0]!.raw, rx.nowS()),
        'a wrong secret does not verify',
      );
      const list = await api.req('GET', `/v1/webhooks/${w.id}/deliveries`, { key: alice.key });
      t.equal(list.status, 200);
      t.equal(list.body.items.length, 1);
      t.equal(list.body.items[0].id, r.body.id);
      await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: alice.key });
    });

    await t.test('a failing receiver walks the exact schedule into the DLQ; replay delivers it', async (t) => {
      rx.modes.set('/fail', 500);
      const w = await create(alice.key, { url: `${rx.base}/fail`, events: ['webhook.test'] });
      rx.secrets.set('/fail', w.signing_secret);
      const first = await api.req('POST', `/v1/webhooks/${w.id}/test`, { key: alice.key });
      t.equal(first.body.status, 'failed');
      t.equal(first.body.response_status, 500);
      t.equal(Buffer.byteLength(first.body.response_body), 1024, 'response body cut to 1 KB');
      const eventId = first.body.event_id;
      let last = first.body;
      for (let i = 0; i < 5; i++) {
        t.equal(
          Date.parse(last.next_attempt_at) - Date.parse(last.attempted_at),
          SCHEDULE_MS[i],
          `retry ${i + 1} due after ${SCHEDULE_MS[i]! / 60_000} min`,
        );
        // Not before it is due.
        clock.advance(SCHEDULE_MS[i]! - 1000);
        await new Promise((r) => setTimeout(r, 120));
        t.equal(rx.received.filter((x) => x.path === '/fail').length, i + 1, 'nothing sent before the due time');
        clock.advance(1000);
        await rx.waitFor((r) => r.filter((x) => x.path === '/fail').length === i + 2);
        let rec: any;
        await waitUntil(async () => {
          const page = await api.req('GET', `/v1/webhooks/${w.id}/deliveries`, { key: alice.key });
          rec = page.body.items.find((x: any) => x.attempt_number === i + 2);
          return rec !== undefined && rec.status !== 'pending';
        });
        if (i < 4) {
          const page = await api.req('GET', `/v1/webhooks/${w.id}/deliveries`, { key: alice.key });
          t.equal(page.body.items[0].status, 'pending', 'newest first: the scheduled attempt');
          t.equal(page.body.items[0].attempt_number, i + 3);
          t.equal(page.body.items[0].next_attempt_at, rec.next_attempt_at);
        }
        last = rec;
        t.equal(last.event_id, eventId, 'same event on every attempt');
        t.equal(last.status, i < 4 ? 'failed' : 'dead_lettered');
      }
      t.equal(last.attempt_number, 6, 'five retries after the first attempt');
      t.equal(last.next_attempt_at, null);
      const all = rx.received.filter((x) => x.path === '/fail');
      t.ok(
        all.every((x) => x.id === eventId && x.verified === true),
        'every attempt carries the same evt_ id and a valid signature',
      );
      clock.advance(48 * 3600_000);
      await new Promise((r) => setTimeout(r, 150));
      t.equal(rx.received.filter((x) => x.path === '/fail').length, 6, 'nothing after the DLQ');

      // Admin: below Enterprise 403 tier_required; Enterprise needs MFA.
      envelope(t, await api.req('GET', '/v1/admin/dlq', { key: alice.key }), 403, 'tier_required');
      envelope(t, await api.req('GET', '/v1/admin/degradation', { key: alice.key }), 403, 'tier_required');
      envelope(t, await api.req('POST', '/v1/admin/dlq/replay', { key: alice.key, json: {} }), 403, 'tier_required');
      t.ok(await s.cp.store.setTierByEmail(alice.email, 'enterprise'));
      envelope(t, await api.req('GET', '/v1/admin/dlq', { key: alice.key }), 403, 'mfa_enrollment_required');
      const reverify = await mfa(api, alice.key, clock);
      const dlq = await api.req('GET', '/v1/admin/dlq', { key: alice.key });
      t.equal(dlq.status, 200, dlq.text);
      t.equal(dlq.body.items.length, 1);
      t.equal(dlq.body.items[0].id, last.id);
      t.equal(dlq.body.items[0].status, 'dead_lettered');
      t.same((await api.req('GET', '/v1/admin/degradation', { key: alice.key })).body, { modes: [] });
      const badIds = envelope(
        t,
        await api.req('POST', '/v1/admin/dlq/replay', { key: alice.key, json: { delivery_ids: ['nope'] } }),
        400,
        'invalid_parameters',
      );
      t.equal(badIds.field, 'delivery_ids[0]');

      // The receiver recovers, slowly: the replay is in progress while it answers.
      rx.modes.set('/fail', { delayMs: 600, status: 200 });
      const rep = await api.req('POST', '/v1/admin/dlq/replay', { key: alice.key, json: { delivery_ids: [last.id] } });
      t.equal(rep.status, 202, rep.text);
      t.same(rep.body, { replayed: 1 });
      const deg = await api.req('GET', '/v1/admin/degradation', { key: alice.key });
      t.equal(deg.body.modes.length, 1, 'dlq_replay_in_progress while the replay runs');
      t.equal(deg.body.modes[0].mode, 'dlq_replay_in_progress');
      t.match(deg.body.modes[0].since, /Z$/);
      await rx.waitFor((r) => r.filter((x) => x.path === '/fail').length === 7);
      const replayed = rx.received.filter((x) => x.path === '/fail')[6]!;
      t.equal(replayed.id, eventId, 'replay sends the same evt_ id');
      t.equal(replayed.verified, true);
      await waitUntil(async () => {
        const d = await api.req('GET', '/v1/admin/degradation', { key: alice.key });
        return d.body.modes.length === 0;
      });
      const after = await api.req('GET', `/v1/webhooks/${w.id}/deliveries?limit=1`, { key: alice.key });
      t.equal(after.body.items[0].status, 'succeeded');
      t.equal(after.body.items[0].replay, true);
      t.same((await api.req('GET', '/v1/admin/dlq', { key: alice.key })).body.items, [], 'DLQ empty after replay');
      const again = await api.req('POST', '/v1/admin/dlq/replay', { key: alice.key, json: {} });
      t.same(again.body, { replayed: 0 }, 'a replayed dead letter is not replayed twice');
      // Webhook writes on a paid tier need a recent MFA verification.
      clock.advance(16 * 60_000);
      envelope(t, await api.req('POST', `/v1/webhooks/${w.id}/test`, { key: alice.key }), 403, 'mfa_required');
      envelope(t, await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: alice.key }), 403, 'mfa_required');
      envelope(t, await api.req('GET', '/v1/admin/dlq', { key: alice.key }), 403, 'mfa_required');
      t.equal((await api.req('GET', `/v1/webhooks/${w.id}`, { key: alice.key })).status, 200, 'reads need no MFA');
      await reverify(clock);
      t.equal((await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: alice.key })).status, 204);
    });

    await t.test('redirects are not followed', async (t) => {
      rx.modes.set('/redirect', 'redirect');
      const w = await create(bob.key, { url: `${rx.base}/redirect`, events: ['webhook.test'] });
      const before = rx.received.filter((x) => x.path === '/ok').length;
      const r = await api.req('POST', `/v1/webhooks/${w.id}/test`, { key: bob.key });
      t.equal(r.body.status, 'failed');
      t.equal(r.body.response_status, 302);
      await new Promise((res) => setTimeout(res, 100));
      t.equal(rx.received.filter((x) => x.path === '/ok').length, before, 'the redirect target got nothing');
      await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: bob.key });
    });

    await t.test('a timeout is a failed attempt with the reason', async (t) => {
      rx.modes.set('/hang', 'hang');
      const w = await create(bob.key, { url: `${rx.base}/hang`, events: ['webhook.test'] });
      const r = await api.req('POST', `/v1/webhooks/${w.id}/test`, { key: bob.key });
      t.equal(r.body.status, 'failed');
      t.equal(r.body.response_status, null);
      t.match(r.body.error, /^timeout after 2000 ms/);
      t.ok(r.body.duration_ms >= 1900 && r.body.duration_ms < 5000, `duration ${r.body.duration_ms}`);
      await api.req('DELETE', `/v1/webhooks/${w.id}`, { key: bob.key });
    });

    await t.test('an event of a rolled-back state change is never stored', async (t) => {
      await create(bob.key, { url: `${rx.base}/ok`, events: ['cdp.generated'] });
      const evId = 'evt_rollback000000000000000000';
      await t.rejects(
        s.cp.store.recordDestruction({
          capsule: {
            id: 'cap_missing',
            customer_id: bob.customer_id,
            billable: true,
          } as never,
          from: ['active'],
          status: 'destroyed',
          destroyed_at: clock.nowIso(),
          proof: {
            proof_id: 'prf_rollback',
            capsule_id: 'cap_missing',
            customer_id: bob.customer_id,
            record: {},
            response: null,
            partial: false,
            created_at: clock.nowIso(),
          },
          key: null,
          usage: { id: 'use_rollback', kind: 'proof', quantity: 1, at: clock.nowIso() } as never,
          events: [
            {
              id: evId,
              customer_id: bob.customer_id,
              type: 'cdp.generated',
              created_at: clock.nowIso(),
              payload: '{}',
            },
          ],
        }),
      );
      const ev = await dbQuery(driver, s.db, 'select count(*) as "n" from "webhook_events" where "id" = ?', [evId]);
      const dl = await dbQuery(driver, s.db, 'select count(*) as "n" from "webhook_deliveries" where "event_id" = ?', [
        evId,
      ]);
      t.equal(Number(ev[0].n), 0, 'no event');
      t.equal(Number(dl[0].n), 0, 'no delivery');
    });

    await t.test('endpoints per account are bounded', async (t) => {
      const u = await api.signup();
      for (let i = 0; i < 20; i++) await create(u.key, { url: `${rx.base}/n${i}`, events: ['webhook.test'] });
      const e = envelope(
        t,
        await api.req('POST', '/v1/webhooks', {
          key: u.key,
          json: { url: `${rx.base}/n21`, events: ['webhook.test'] },
        }),
        402,
        'quota_exceeded',
      );
      t.equal(e.limit, 'webhook_endpoints');
    });

    await t.test('no signing secret in any log line', async (t) => {
      t.ok(secrets.length > 5);
      const text = logs.join('');
      t.ok(text.length > 0, 'logs were captured');
      for (const sec of secrets) t.notOk(text.includes(sec.slice(6)), 'secret absent from logs');
      t.notOk(/whsec_/.test(text));
    });
  });

  t.test(`${driver}: SSRF refusals without CAPSULE_WEBHOOK_ALLOW_PRIVATE`, async (t) => {
    const rx = await startReceiver();
    t.teardown(() => rx.close());
    const s = await start(driver, noRunner, { CAPSULE_RATE_LIMITS: 'off', CAPSULE_WEBHOOK_POLL_MS: '20' }, undefined, {
      webhookResolver: async (host) => {
        const map: Record<string, string> = { 'metadata.test': '169.254.169.254', 'lan.test': '10.1.2.3' };
        if (map[host]) return [{ address: map[host], family: 4 }];
        const { lookup } = await import('node:dns/promises');
        return lookup(host, { all: true });
      },
    });
    t.teardown(s.close);
    const { api } = s;
    const u = await api.signup();
    for (const url of [
      `https://127.0.0.1:${rx.port}/x`,
      'https://169.254.169.254/latest/meta-data/',
      'https://[::1]/x',
      'https://10.0.0.5/x',
      'https://[::ffff:127.0.0.1]/x',
      'http://example.com/x',
    ]) {
      const e = envelope(
        t,
        await api.req('POST', '/v1/webhooks', { key: u.key, json: { url, events: ['webhook.test'] } }),
        400,
        'invalid_parameters',
      );
      t.equal(e.field, 'url', url);
    }
    // Names are resolved at delivery time and refused by address.
    for (const [host, kind] of [
      [`localhost:${rx.port}`, 'loopback'],
      ['metadata.test', 'metadata'],
      ['lan.test', 'private'],
    ] as const) {
      const w = await api.req('POST', '/v1/webhooks', {
        key: u.key,
        json: { url: `https://${host}/ssrf`, events: ['webhook.test'] },
      });
      t.equal(w.status, 201, w.text);
      const r = await api.req('POST', `/v1/webhooks/${w.body.id}/test`, { key: u.key });
      t.equal(r.body.status, 'failed');
      t.equal(r.body.response_status, null);
      t.match(
        r.body.error,
        new RegExp(`^refused: ${host.split(':')[0]} resolves to ${kind.replace('_', '-')} address`),
      );
    }
    await new Promise((r) => setTimeout(r, 100));
    t.equal(rx.received.length, 0, 'the loopback receiver was never reached');
  });
}

t.test('operator settings are validated at start, naming the variable', async (t) => {
  const { loadConfig } = await import('../../control-plane/config.js');
  const rx = await startReceiver();
  t.teardown(() => rx.close());
  const base = { CAPSULE_DATA_DIR: tmpdir() };
  t.throws(() => loadConfig({ ...base, CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile }), /^CAPSULE_WEBHOOK_EXTRA_CA: only with/);
  t.throws(
    () => loadConfig({ ...base, CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1', CAPSULE_WEBHOOK_EXTRA_CA: '/nonexistent.pem' }),
    /^CAPSULE_WEBHOOK_EXTRA_CA \(\/nonexistent\.pem\)/,
  );
  t.throws(() => loadConfig({ ...base, CAPSULE_WEBHOOK_ALLOW_PRIVATE: 'maybe' }), /^CAPSULE_WEBHOOK_ALLOW_PRIVATE/);
  t.throws(() => loadConfig({ ...base, CAPSULE_WEBHOOK_TIMEOUT_MS: '5' }), /^CAPSULE_WEBHOOK_TIMEOUT_MS: an integer/);
  t.throws(() => loadConfig({ ...base, CAPSULE_WEBHOOK_CONCURRENCY: '-1' }), /^CAPSULE_WEBHOOK_CONCURRENCY/);
  const c = loadConfig({ ...base, CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1', CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile });
  t.equal(c.webhooks.allowPrivate, true);
  t.match(c.webhooks.extraCaPem, /BEGIN CERTIFICATE/);
  const d = loadConfig(base);
  t.same(
    [d.webhooks.allowPrivate, d.webhooks.timeoutMs, d.webhooks.concurrency, d.webhooks.perEndpoint],
    [false, 10_000, 16, 2],
    'defaults',
  );
});
