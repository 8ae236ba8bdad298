// Usage over real HTTP against a real sandbox runner, on SQLite and
// PostgreSQL: one item per billable event (capsule, exec with its duration,
// proof), test keys labelled and never billed, summary and estimate from a
// price table, item pages, and the CSV export read back with a CSV parser.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parse } from 'csv-parse/sync';
import { isoMicros } from '../../shared/time.js';
import type { Clock } from '../../control-plane/domain/index.js';
import { startRunner } from '../helpers/runner.js';
import { dbQuery, DRIVERS, envelope, start, type Api } from './harness.js';

const FIELDS = ['id', 'created_at', 'kind', 'capsule_id', 'quantity', 'unit', 'mode', 'billable'];

/** Real time moved to 10 days into a 31-day month, so the estimate's projection is known. */
const BASE = Date.UTC(2030, 2, 11);
const offset = BASE - Date.now();
const clock: Clock = { nowMs: () => Date.now() + offset, nowIso: () => isoMicros(Date.now() + offset) };

const PRICES = `currency: eur
tiers:
${['free', 'starter', 'business', 'enterprise']
  .map(
    (tier) => `  ${tier}:
    base_fee: '10.50'
    metered:
      capsules: { included: 1, unit_price: '0.25' }
      proofs: { included: 0, unit_price: '0.125' }
      exec_seconds: { included: 0, unit_price: '0.01' }
      egress_requests: { included: 5, unit_price: '0.001' }`,
  )
  .join('\n')}
`;

async function all(api: Api, key: string, query = ''): Promise<any[]> {
  const items: any[] = [];
  let cursor: string | null = null;
  do {
    const q: string = `?limit=100${query}${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`;
    const r = await api.req('GET', `/v1/usage/items${q}`, { key });
    if (r.status !== 200) throw new Error(`items: ${r.status} ${r.text}`);
    items.push(...r.body.items);
    cursor = r.body.next_cursor;
  } while (cursor !== null);
  return items;
}

/** The CSV rows as JSON items would print them (every value a string). */
const asCsv = (items: any[]): string[][] => items.map((i) => FIELDS.map((f) => String(i[f])));

for (const driver of DRIVERS) {
  t.test(`${driver}: usage`, async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'cp-usage-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    writeFileSync(join(dir, 'prices.yaml'), PRICES);
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(
      driver,
      runner.client,
      { CAPSULE_RATE_LIMITS: 'off', CAPSULE_PRICES_FILE: join(dir, 'prices.yaml') },
      undefined,
      { clock },
    );
    t.teardown(s.close);
    const { api } = s;

    const lifecycle = async (key: string, command?: string): Promise<{ id: string; execMs: number | null }> => {
      const c = await api.req('POST', '/v1/capsules', { key, json: { max_lifetime_seconds: 120 } });
      if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
      t.equal(c.body.ttl_seconds, 120, 'max_lifetime_seconds is the ttl');
      let execMs: number | null = null;
      if (command) {
        const e = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command } });
        if (e.status !== 200) throw new Error(`exec: ${e.status} ${e.text}`);
        // Items carry integers: the exec's duration in whole milliseconds.
        execMs = Math.round(e.body.duration_ms);
      }
      const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
      if (d.status !== 200) throw new Error(`destroy: ${d.status} ${d.text}`);
      return { id: c.body.id, execMs };
    };

    await t.test('items, summary and estimate; test keys leave billing untouched', async (t) => {
      const u = await api.signup();
      const a = await lifecycle(u.key, 'sleep 0.3; echo done');
      const b = await lifecycle(u.key);
      t.ok((a.execMs ?? 0) >= 300, `exec took ${a.execMs} ms`);

      const items = await all(api, u.key);
      t.equal(items.length, 5, 'capsule, exec, proof + capsule, proof');
      for (const i of items) {
        t.match(i.id, /^usg_[0-9a-f]{24}$/);
        t.equal(i.mode, 'live');
        t.equal(i.billable, true);
        t.same(Object.keys(i), FIELDS);
      }
      const kinds = (cid: string) =>
        items
          .filter((i) => i.capsule_id === cid)
          .map((i) => i.kind)
          .sort();
      t.same(kinds(a.id), ['capsule', 'exec', 'proof']);
      t.same(kinds(b.id), ['capsule', 'proof']);
      const exec = items.find((i) => i.kind === 'exec');
      t.equal(exec.quantity, a.execMs, 'exec item carries the duration the exec reported');
      t.equal(exec.unit, 'millisecond');
      t.equal(items.find((i) => i.kind === 'capsule').unit, 'capsule');

      const sum1 = (await api.req('GET', '/v1/usage/summary', { key: u.key })).body;
      t.match(sum1, {
        tier: 'free',
        billing_cycle_start: '2030-03-01T00:00:00.000000Z',
        billing_cycle_end: '2030-04-01T00:00:00.000000Z',
        capsules: 2,
        proofs: 2,
        exec_seconds: (a.execMs ?? 0) / 1000,
        egress_requests: 0,
        limits: { capsules_per_month: 100, max_ttl_seconds: 300, max_lifetime_seconds: 300, cdp_limit: 100 },
        test_mode: { capsules: 0, proofs: 0, exec_seconds: 0, egress_requests: 0 },
      });
      t.type(sum1.bytes_processed, 'number');
      const est1 = (await api.req('GET', '/v1/usage/estimate', { key: u.key })).body;

      // The same work with a test key.
      const testKey = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body.key;
      const tc = await lifecycle(testKey, 'sleep 0.1');
      const testItems = (await all(api, u.key)).filter((i) => i.capsule_id === tc.id);
      t.equal(testItems.length, 3);
      for (const i of testItems) {
        t.equal(i.mode, 'test', 'labelled test');
        t.equal(i.billable, false);
      }
      const me = (await api.req('GET', '/v1/customers/me', { key: u.key })).body;
      t.equal(me.usage.capsules_used_this_month, 2, 'test capsules do not count');
      t.equal(me.usage.cdps_this_cycle, 2, 'test proofs do not count');
      const sum2 = (await api.req('GET', '/v1/usage/summary', { key: u.key })).body;
      t.match(sum2, { capsules: 2, proofs: 2, exec_seconds: sum1.exec_seconds, bytes_processed: sum1.bytes_processed });
      t.match(sum2.test_mode, { capsules: 1, proofs: 1, egress_requests: 0 });
      t.ok(sum2.test_mode.exec_seconds >= 0.1);
      const est2 = (await api.req('GET', '/v1/usage/estimate', { key: u.key })).body;
      t.equal(est2.total_to_date, est1.total_to_date, 'charges unchanged by test keys');
      t.same(
        est2.line_items.map((l: any) => [l.item, l.quantity_to_date, l.amount_to_date]),
        est1.line_items.map((l: any) => [l.item, l.quantity_to_date, l.amount_to_date]),
      );

      // The estimate follows the price table: 10 of 31 days elapsed, projected over the month.
      t.equal(est2.currency, 'eur');
      t.equal(est2.base_fee, '10.50');
      const elapsed = Date.parse(est2.as_of) - Date.parse('2030-03-01T00:00:00Z');
      const projection = (31 * 86400_000) / elapsed;
      const cents = (x: number) => Math.round(x * 100);
      const line = (item: string) => est2.line_items.find((l: any) => l.item === item);
      t.match(line('capsules'), { quantity_to_date: 2, included: 1, unit_price: '0.25', amount_to_date: '0.25' });
      const projCaps = Math.round(2 * projection);
      t.equal(line('capsules').projected_quantity, projCaps);
      t.equal(line('capsules').billable_quantity, projCaps - 1);
      t.equal(line('capsules').amount, ((projCaps - 1) * 0.25).toFixed(2));
      t.match(line('proofs'), { quantity_to_date: 2, unit_price: '0.125', amount_to_date: '0.25' });
      const execMs = a.execMs ?? 0;
      t.equal(line('exec_seconds').quantity_to_date, execMs / 1000);
      t.equal(line('exec_seconds').amount_to_date, (cents((execMs / 1000) * 0.01) / 100).toFixed(2));
      const toDate = 1050 + 25 + 25 + cents((execMs / 1000) * 0.01);
      t.equal(est2.total_to_date, (toDate / 100).toFixed(2), 'total = base fee + lines');
      const projected = est2.line_items.reduce((n: number, l: any) => n + Math.round(Number(l.amount) * 100), 1050);
      t.equal(est2.projected_total, (projected / 100).toFixed(2));

      // Paging and the from/to filters.
      const everything = await all(api, u.key);
      const p1 = await api.req('GET', '/v1/usage/items?limit=3', { key: u.key });
      t.equal(p1.body.items.length, 3);
      const p2 = await api.req('GET', `/v1/usage/items?limit=3&cursor=${encodeURIComponent(p1.body.next_cursor)}`, {
        key: u.key,
      });
      t.same([...p1.body.items, ...p2.body.items], everything.slice(0, 6));
      const from = everything[2].created_at;
      const to = everything[6].created_at;
      const ranged = await all(api, u.key, `&from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`);
      t.same(
        ranged,
        everything.filter((i) => i.created_at >= from && i.created_at < to),
      );
      for (const [q, field] of [
        ['from=yesterday', 'from'],
        ['to=2030-13-45T00:00:00Z', 'to'],
        ['from=2030-03-02T00:00:00Z&to=2030-03-01T00:00:00Z', 'to'],
        ['cursor=abc', 'cursor'],
        ['limit=101', 'limit'],
      ] as const) {
        const r = await api.req('GET', `/v1/usage/items?${q}`, { key: u.key });
        t.match(envelope(t, r, 400, 'invalid_parameters').message, new RegExp(`^${field}:`), q);
      }

      // CSV: the same rows, RFC 4180 with a header row, as an attachment.
      const csv = await api.req('GET', '/v1/usage/items.csv', { key: u.key });
      t.equal(csv.status, 200);
      t.match(csv.headers.get('content-type'), /^text\/csv; charset=utf-8$/);
      t.match(csv.headers.get('content-disposition'), /^attachment; filename="usage-items\.csv"$/);
      t.ok(csv.text.includes('\r\n'), 'CRLF records');
      const rows: string[][] = parse(csv.text);
      t.same(rows[0], FIELDS, 'header row');
      t.same(rows.slice(1), asCsv(everything));
      const rangedCsv: string[][] = parse(
        (
          await api.req('GET', `/v1/usage/items.csv?from=${encodeURIComponent(from)}&to=${encodeURIComponent(to)}`, {
            key: u.key,
          })
        ).text,
      );
      t.same(rangedCsv.slice(1), asCsv(ranged));
      envelope(t, await api.req('GET', '/v1/usage/items.csv?from=nope', { key: u.key }), 400, 'invalid_parameters');
      envelope(t, await api.req('GET', '/v1/usage/items.csv'), 401, 'invalid_api_key');
      // Another account sees none of it.
      const other = await api.signup();
      t.same(await all(api, other.key), []);
      t.same(parse((await api.req('GET', '/v1/usage/items.csv', { key: other.key })).text), [FIELDS]);
    });

    await t.test('a test key is not stopped by the proof quota; a live key is', async (t) => {
      const u = await api.signup();
      await dbQuery(driver, s.db, 'update "accounts" set "cdps_used" = 100 where "customer_id" = ?', [u.customer_id]);
      const live = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
      envelope(t, live, 402, 'quota_exceeded');
      const testKey = (await api.req('POST', '/v1/api-keys', { key: u.key, json: { mode: 'test' } })).body.key;
      const tc = await lifecycle(testKey);
      t.match(tc.id, /^cap_/);
      const me = (await api.req('GET', '/v1/customers/me', { key: u.key })).body;
      t.equal(me.usage.cdps_this_cycle, 100);
      t.equal(me.usage.capsules_used_this_month, 0);
    });

    await t.test('export across many batches: CSV and JSON pages agree row for row', async (t) => {
      const u = await api.signup();
      // 4,500 items (more than two export batches), some sharing a timestamp, quoted values absent by construction.
      const n = 4500;
      const base = Date.parse('2030-03-05T00:00:00Z');
      const values: unknown[] = [];
      const marks: string[] = [];
      for (let i = 0; i < n; i++) {
        marks.push('(?, ?, ?, ?, ?, ?, ?)');
        values.push(
          `usg_${randomBytes(12).toString('hex')}`,
          u.customer_id,
          ['capsule', 'exec', 'proof', 'egress_request'][i % 4],
          `cap_${(i % 7).toString(16).padStart(24, '0')}`,
          i % 4 === 1 ? 1000 + i : 1,
          i % 5 === 0 ? 0 : 1,
          isoMicros(base + Math.floor(i / 3) * 1000),
        );
      }
      for (let i = 0; i < n; i += 500)
        await dbQuery(
          driver,
          s.db,
          `insert into "usage_items" ("id", "customer_id", "kind", "capsule_id", "quantity", "billable", "created_at") values ${marks.slice(i, i + 500).join(', ')}`,
          values.slice(i * 7, (i + 500) * 7),
        );
      const json = await all(api, u.key);
      t.equal(json.length, n);
      const rows: string[][] = parse((await api.req('GET', '/v1/usage/items.csv', { key: u.key })).text);
      t.equal(rows.length, n + 1);
      t.same(rows.slice(1), asCsv(json));
      t.equal(json.filter((i) => i.mode === 'test').length, n / 5);
    });
  });
}
