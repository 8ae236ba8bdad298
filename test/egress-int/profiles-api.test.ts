// Egress profiles API (SPEC "Egress profiles"): every endpoint, the Team tier
// gate, validation errors naming the field, 409 deleting a profile a live
// capsule uses, ownership 404s, cursor paging; on SQLite and PostgreSQL with
// the real runner (the in-use case needs a real capsule with a real proxy).
import t from 'tap';
import { DRIVERS, envelope, start } from '../control-plane/harness.js';
import { startRunner } from '../helpers/runner.js';

t.test('egress profiles API', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());

  for (const driver of DRIVERS) {
    await t.test(driver, async (t) => {
      const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' });
      t.teardown(s.close);
      const { api } = s;
      const team = await api.signup();
      const other = await api.signup();
      const free = await api.signup();
      const starter = await api.signup();
      await s.cp.store.setTierByEmail(team.email, 'business');
      await s.cp.store.setTierByEmail(other.email, 'enterprise');
      await s.cp.store.setTierByEmail(starter.email, 'starter');
      const k = team.key;

      await t.test('tier gate: every endpoint is 403 tier_required below Team', async (t) => {
        const calls: [string, string, unknown?][] = [
          ['POST', '/v1/egress/profiles', { name: 'x' }],
          ['GET', '/v1/egress/profiles'],
          ['GET', '/v1/egress/profiles/egp_00'],
          ['PUT', '/v1/egress/profiles/egp_00', { name: 'y' }],
          ['DELETE', '/v1/egress/profiles/egp_00'],
          ['POST', '/v1/egress/profiles/egp_00/rules', { kind: 'domain', value: 'a.example', port: 443 }],
          ['GET', '/v1/egress/profiles/egp_00/rules'],
          ['DELETE', '/v1/egress/profiles/egp_00/rules/egr_00'],
          ['GET', '/v1/egress'],
          ['POST', '/v1/egress', { kind: 'domain', value: 'a.example', port: 443 }],
          ['DELETE', '/v1/egress/egr_00'],
        ];
        for (const who of [free, starter]) {
          for (const [m, p, json] of calls) {
            const e = envelope(
              t,
              await api.req(m, p, { key: who.key, ...(json !== undefined ? { json } : {}) }),
              403,
              'tier_required',
            );
            t.equal(e.type, 'forbidden', `${m} ${p}`);
          }
        }
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: free.key, json: { egress_profile_id: 'egp_00' } }),
          403,
          'tier_required',
        );
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: starter.key, json: { egress_profile_id: 'egp_00' } }),
          403,
          'tier_required',
        );
        envelope(t, await api.req('GET', '/v1/egress/profiles'), 401, 'invalid_api_key');
      });

      let pid = '';
      await t.test('create, read, update, list profiles', async (t) => {
        const c = await api.req('POST', '/v1/egress/profiles', {
          key: k,
          json: { name: 'partners', description: 'partner APIs' },
        });
        t.equal(c.status, 201, c.text);
        t.match(c.body, {
          id: /^egp_[0-9a-f]+$/,
          name: 'partners',
          description: 'partner APIs',
          created_at: /^\d{4}-.*Z$/,
        });
        t.equal(c.headers.get('location'), `/v1/egress/profiles/${c.body.id}`);
        pid = c.body.id;
        const g = await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k });
        t.equal(g.status, 200);
        t.same(g.body, {
          id: pid,
          name: 'partners',
          description: 'partner APIs',
          created_at: c.body.created_at,
          rules: [],
        });
        const u = await api.req('PUT', `/v1/egress/profiles/${pid}`, { key: k, json: { name: 'partners-eu' } });
        t.equal(u.status, 200, u.text);
        t.equal(u.body.name, 'partners-eu');
        t.equal(u.body.description, 'partner APIs', 'PUT without description keeps it');
        const u2 = await api.req('PUT', `/v1/egress/profiles/${pid}`, { key: k, json: { description: 'EU partners' } });
        t.equal(u2.body.description, 'EU partners');
        t.equal((await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k })).body.name, 'partners-eu');
        // Names are unique per account (409 naming the field); another account may reuse one.
        const dup = envelope(
          t,
          await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: 'partners-eu' } }),
          409,
          'resource_conflict',
        );
        t.match(dup.message, /^name: /);
        t.equal(
          (await api.req('POST', '/v1/egress/profiles', { key: other.key, json: { name: 'partners-eu' } })).status,
          201,
        );
        const second = await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: 'second' } });
        envelope(
          t,
          await api.req('PUT', `/v1/egress/profiles/${second.body.id}`, { key: k, json: { name: 'partners-eu' } }),
          409,
          'resource_conflict',
        );
        // Cursor paging, newest first, only own profiles.
        for (let i = 0; i < 3; i++) await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: `p${i}` } });
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const q: string = cursor ? `&cursor=${encodeURIComponent(cursor)}` : '';
          const l = await api.req('GET', `/v1/egress/profiles?limit=2${q}`, { key: k });
          t.equal(l.status, 200, l.text);
          t.ok(l.body.items.length <= 2);
          for (const it of l.body.items) {
            t.same(Object.keys(it).sort(), ['created_at', 'description', 'id', 'name']);
            seen.push(it.name);
          }
          cursor = l.body.next_cursor;
          pages++;
        } while (cursor && pages < 10);
        t.same(seen.sort(), ['p0', 'p1', 'p2', 'partners-eu', 'second'], "every own profile once, no other account's");
        t.equal(pages, 3);
        envelope(t, await api.req('GET', '/v1/egress/profiles?cursor=bogus', { key: k }), 400, 'invalid_parameters');
        envelope(t, await api.req('GET', '/v1/egress/profiles?limit=0', { key: k }), 400, 'invalid_parameters');
      });

      await t.test('profile validation names the field', async (t) => {
        const bad: [unknown, RegExp][] = [
          [{}, /^name: is required/],
          [{ name: '' }, /^name: /],
          [{ name: 42 }, /^name: must be a string/],
          [{ name: 'x'.repeat(129) }, /^name: at most 128/],
          [{ name: 'ok', description: 7 }, /^description: /],
          [{ name: 'ok', colour: 'red' }, /^colour: unknown field/],
        ];
        for (const [json, msg] of bad) {
          const e = envelope(
            t,
            await api.req('POST', '/v1/egress/profiles', { key: k, json }),
            400,
            'invalid_parameters',
          );
          t.match(e.message, msg, JSON.stringify(json));
        }
        envelope(
          t,
          await api.req('PUT', `/v1/egress/profiles/${pid}`, { key: k, json: {} }),
          400,
          'invalid_parameters',
        );
        envelope(
          t,
          await api.req('POST', '/v1/egress/profiles', {
            key: k,
            raw: '{"name":',
            headers: { 'content-type': 'application/json' },
          }),
          400,
          'invalid_parameters',
        );
      });

      const rid: string[] = [];
      await t.test('rules: add, list, validate, delete', async (t) => {
        const good = [
          { kind: 'domain', value: 'API.Example.com', port: 443 },
          { kind: 'domain', value: '*.example.org', port: 443 },
          { kind: 'ip_v4', value: '127.0.0.1', port: 8443 },
          { kind: 'ip_v6', value: '2001:db8::1', port: 443 },
          { kind: 'cidr_v4', value: '10.0.0.0/8', port: 443 },
          { kind: 'cidr_v6', value: '2001:db8::/32', port: 443 },
        ];
        for (const json of good) {
          const r = await api.req('POST', `/v1/egress/profiles/${pid}/rules`, { key: k, json });
          t.equal(r.status, 201, r.text);
          t.match(r.body, { id: /^egr_[0-9a-f]+$/, kind: json.kind, port: json.port, profile_id: pid });
          rid.push(r.body.id);
        }
        t.equal(
          (await api.req('GET', `/v1/egress/profiles/${pid}/rules`, { key: k })).body.items[0].value,
          'api.example.com',
          'hostnames stored normalized',
        );
        const bad: [unknown, string][] = [
          [{ kind: 'cidr_v4', value: '10.0.0.0/33', port: 443 }, 'value'],
          [{ kind: 'cidr_v4', value: 'not-a-cidr', port: 443 }, 'value'],
          [{ kind: 'domain', value: 'api.example.com', port: 0 }, 'port'],
          [{ kind: 'domain', value: 'api.example.com', port: 70000 }, 'port'],
          [{ kind: 'domain', value: 'api.example.com', port: 44.5 }, 'port'],
          [{ kind: 'domain', value: 'bad host.example.com', port: 443 }, 'value'],
          [{ kind: 'ip_v4', value: '300.1.1.1', port: 443 }, 'value'],
          [{ kind: 'smtp', value: 'mail.example.com', port: 25 }, 'kind'],
          [{ kind: 'domain', port: 443 }, 'value'],
          [{ kind: 'domain', value: 'a.example', port: 443, note: 'x' }, 'note'],
        ];
        for (const [json, field] of bad) {
          const e = envelope(
            t,
            await api.req('POST', `/v1/egress/profiles/${pid}/rules`, { key: k, json }),
            400,
            'invalid_parameters',
          );
          t.match(e.message, new RegExp(`^${field}: `), `${JSON.stringify(json)} -> ${e.message}`);
          const flat = envelope(t, await api.req('POST', '/v1/egress', { key: k, json }), 400, 'invalid_parameters');
          t.match(flat.message, new RegExp(`^${field}: `));
        }
        envelope(
          t,
          await api.req('POST', `/v1/egress/profiles/${pid}/rules`, { key: k, json: good[0] }),
          409,
          'resource_conflict',
        );
        const list = await api.req('GET', `/v1/egress/profiles/${pid}/rules?limit=4`, { key: k });
        t.equal(list.body.items.length, 4);
        t.type(list.body.next_cursor, 'string');
        const rest = await api.req(
          'GET',
          `/v1/egress/profiles/${pid}/rules?limit=4&cursor=${encodeURIComponent(list.body.next_cursor)}`,
          { key: k },
        );
        t.same(
          [...list.body.items, ...rest.body.items].map((r: { id: string }) => r.id),
          rid,
          'oldest first, every rule once',
        );
        t.equal(rest.body.next_cursor, null);
        const detail = await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k });
        t.same(
          detail.body.rules.map((r: { id: string }) => r.id),
          rid,
        );
        t.same(Object.keys(detail.body.rules[0]).sort(), ['id', 'kind', 'port', 'value']);
        const del = await api.req('DELETE', `/v1/egress/profiles/${pid}/rules/${rid[5]}`, { key: k });
        t.equal(del.status, 204);
        envelope(
          t,
          await api.req('DELETE', `/v1/egress/profiles/${pid}/rules/${rid[5]}`, { key: k }),
          404,
          'resource_not_found',
        );
        rid.pop();
      });

      await t.test('flat endpoints use the default profile, created on first use', async (t) => {
        const before = await api.req('GET', '/v1/egress', { key: k });
        t.equal(before.body.items.length, rid.length, 'flat list holds every rule of the account');
        const add = await api.req('POST', '/v1/egress', {
          key: k,
          json: { kind: 'domain', value: 'flat.example', port: 443 },
        });
        t.equal(add.status, 201, add.text);
        const profiles = (await api.req('GET', '/v1/egress/profiles?limit=100', { key: k })).body.items;
        const def = profiles.find((p: { name: string }) => p.name === 'default');
        t.ok(def, 'a profile named default now exists');
        t.equal(add.body.profile_id, def.id);
        const add2 = await api.req('POST', '/v1/egress', {
          key: k,
          json: { kind: 'ip_v4', value: '127.0.0.1', port: 443 },
        });
        t.equal(add2.body.profile_id, def.id, 'the same default profile next time');
        t.equal(
          (await api.req('GET', '/v1/egress/profiles?limit=100', { key: k })).body.items.filter(
            (p: { name: string }) => p.name === 'default',
          ).length,
          1,
        );
        const all = await api.req('GET', '/v1/egress?limit=100', { key: k });
        t.equal(all.body.items.length, rid.length + 2);
        t.ok(all.body.items.every((r: { profile_id: string }) => [pid, def.id].includes(r.profile_id)));
        // Delete by id, from any own profile.
        t.equal((await api.req('DELETE', `/v1/egress/${add.body.id}`, { key: k })).status, 204);
        t.equal((await api.req('DELETE', `/v1/egress/${rid[0]}`, { key: k })).status, 204);
        rid.shift();
        envelope(t, await api.req('DELETE', `/v1/egress/${add.body.id}`, { key: k }), 404, 'resource_not_found');
        t.equal((await api.req('GET', '/v1/egress?limit=100', { key: k })).body.items.length, rid.length + 1);
        // Bad input on a fresh account leaves no default profile behind.
        const fresh = await api.signup();
        await s.cp.store.setTierByEmail(fresh.email, 'business');
        envelope(
          t,
          await api.req('POST', '/v1/egress', { key: fresh.key, json: { kind: 'domain', value: 'x y', port: 443 } }),
          400,
          'invalid_parameters',
        );
        t.same(
          (await api.req('GET', '/v1/egress/profiles', { key: fresh.key })).body.items,
          [],
          'nothing half-written',
        );
      });

      await t.test("ownership: another account's profiles and rules are 404", async (t) => {
        const o = other.key;
        envelope(t, await api.req('GET', `/v1/egress/profiles/${pid}`, { key: o }), 404, 'resource_not_found');
        envelope(
          t,
          await api.req('PUT', `/v1/egress/profiles/${pid}`, { key: o, json: { name: 'mine' } }),
          404,
          'resource_not_found',
        );
        envelope(t, await api.req('DELETE', `/v1/egress/profiles/${pid}`, { key: o }), 404, 'resource_not_found');
        envelope(t, await api.req('GET', `/v1/egress/profiles/${pid}/rules`, { key: o }), 404, 'resource_not_found');
        envelope(
          t,
          await api.req('POST', `/v1/egress/profiles/${pid}/rules`, {
            key: o,
            json: { kind: 'domain', value: 'a.example', port: 443 },
          }),
          404,
          'resource_not_found',
        );
        envelope(
          t,
          await api.req('DELETE', `/v1/egress/profiles/${pid}/rules/${rid[0]}`, { key: o }),
          404,
          'resource_not_found',
        );
        envelope(t, await api.req('DELETE', `/v1/egress/${rid[0]}`, { key: o }), 404, 'resource_not_found');
        t.equal(
          (await api.req('GET', '/v1/egress', { key: o })).body.items.length,
          0,
          'flat list shows only own rules',
        );
        const e = envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: o, json: { egress_profile_id: pid } }),
          404,
          'resource_not_found',
        );
        t.match(e.message, /^egress_profile_id: /);
        // A rule id under the wrong (own) profile is 404 too.
        const mine = await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: 'empty' } });
        envelope(
          t,
          await api.req('DELETE', `/v1/egress/profiles/${mine.body.id}/rules/${rid[0]}`, { key: k }),
          404,
          'resource_not_found',
        );
        t.equal(
          (await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k })).body.rules.length,
          rid.length,
          'nothing was removed',
        );
      });

      await t.test('delete: 409 while a live capsule uses the profile, 204 after', async (t) => {
        const cap = await api.req('POST', '/v1/capsules', { key: k, json: { egress_profile_id: pid, ttl: 120 } });
        t.equal(cap.status, 201, cap.text);
        const e = envelope(
          t,
          await api.req('DELETE', `/v1/egress/profiles/${pid}`, { key: k }),
          409,
          'resource_conflict',
        );
        t.match(e.message, /in use/);
        t.equal((await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k })).status, 200, 'still there');
        const d = await api.req('DELETE', `/v1/capsules/${cap.body.id}`, { key: k });
        t.equal(d.status, 200, d.text);
        t.equal((await api.req('DELETE', `/v1/egress/profiles/${pid}`, { key: k })).status, 204);
        envelope(t, await api.req('GET', `/v1/egress/profiles/${pid}`, { key: k }), 404, 'resource_not_found');
        envelope(t, await api.req('GET', `/v1/egress/profiles/${pid}/rules`, { key: k }), 404, 'resource_not_found');
        t.notOk(
          (await api.req('GET', '/v1/egress?limit=100', { key: k })).body.items.some(
            (r: { profile_id: string }) => r.profile_id === pid,
          ),
          'its rules went with it',
        );
        envelope(
          t,
          await api.req('POST', '/v1/capsules', { key: k, json: { egress_profile_id: pid } }),
          404,
          'resource_not_found',
        );
      });

      await t.test('rule adds racing a profile DELETE: 201 or 404, never a 500, no rule left behind', async (t) => {
        for (let round = 0; round < 5; round++) {
          const p = await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: `doomed-${round}` } });
          t.equal(p.status, 201, p.text);
          const adds = Array.from({ length: 8 }, (_, i) =>
            api.req('POST', `/v1/egress/profiles/${p.body.id}/rules`, {
              key: k,
              json: { kind: 'domain', value: `r${i}.example`, port: 443 },
            }),
          );
          const del = api.req('DELETE', `/v1/egress/profiles/${p.body.id}`, { key: k });
          const results = await Promise.all(adds);
          t.equal((await del).status, 204);
          for (const r of results) {
            if (r.status !== 201) envelope(t, r, 404, 'resource_not_found');
          }
          const left = (await api.req('GET', '/v1/egress?limit=100', { key: k })).body.items as {
            profile_id: string;
          }[];
          t.notOk(
            left.some((r) => r.profile_id === p.body.id),
            `round ${round}: no rule of the deleted profile`,
          );
        }
      });

      await t.test('a profile holds at most 500 rules, also under concurrent adds', async (t) => {
        const p = await api.req('POST', '/v1/egress/profiles', { key: k, json: { name: 'full' } });
        t.equal(p.status, 201, p.text);
        const add = (i: number) =>
          api.req('POST', `/v1/egress/profiles/${p.body.id}/rules`, {
            key: k,
            json: { kind: 'domain', value: `h${i}.example`, port: 443 },
          });
        for (let i = 0; i < 495; i += 15) {
          const rs = await Promise.all(Array.from({ length: Math.min(15, 495 - i) }, (_, j) => add(i + j)));
          t.ok(
            rs.every((r) => r.status === 201),
            `rules ${i}..: 201`,
          );
        }
        const last = await Promise.all(Array.from({ length: 12 }, (_, j) => add(1000 + j)));
        t.equal(last.filter((r) => r.status === 201).length, 5, 'exactly 5 of 12 concurrent adds fit');
        for (const r of last.filter((x) => x.status !== 201))
          t.match(envelope(t, r, 400, 'invalid_parameters').message, /^profile: .*500 rules/);
        t.equal((await api.req('GET', `/v1/egress/profiles/${p.body.id}`, { key: k })).body.rules.length, 500);
      });
    });
  }
});
