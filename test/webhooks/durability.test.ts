// Delivery durability across OS processes, on SQLite and PostgreSQL: two
// control-plane processes on one database deliver each attempt once (leased
// claims); a process SIGKILLed mid-delivery, or between the commit of an
// event and any delivery, loses nothing: the next process delivers the same
// evt_ id (at-least-once).
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { isoMicros } from '../../shared/time.js';
import { RunnerClient } from '../../shared/node/runner-client.js';
import type { Clock } from '../../control-plane/domain/index.js';
import { openStores } from '../../control-plane/store/index.js';
import { dbQuery, DRIVERS, freshDb, start, testMasterKeyFile, Api, type FreshDb } from '../control-plane/harness.js';
import { startReceiver, type Receiver } from './receiver.js';

const CHILD = fileURLToPath(new URL('./child-cp.js', import.meta.url));
const noRunner = new RunnerClient(join(tmpdir(), `cp-no-runner-whd-${process.pid}.sock`));

interface Child {
  proc: ChildProcess;
  api: Api;
}

async function spawnCp(env: Record<string, string>): Promise<Child> {
  const proc = spawn(process.execPath, [CHILD], {
    env: { PATH: process.env.PATH ?? '', LOG_LEVEL: 'silent', CAPSULE_RATE_LIMITS: 'off', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  proc.stderr!.on('data', (b: Buffer) => (err += b.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    proc.once('exit', (c) => reject(new Error(`child control plane exited (${c}): ${err}`)));
    proc.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /ready (\S+)\n/.exec(out);
      if (m) resolve(m[1]!);
    });
  });
  return { proc, api: new Api(url) };
}

function kill9(c: Child): Promise<void> {
  return new Promise((resolve) => {
    if (c.proc.exitCode !== null || c.proc.signalCode !== null) return resolve();
    c.proc.once('exit', () => resolve());
    c.proc.kill('SIGKILL');
  });
}

async function stop(c: Child): Promise<void> {
  if (c.proc.exitCode !== null || c.proc.signalCode !== null) return;
  const done = new Promise<void>((resolve) => c.proc.once('exit', () => resolve()));
  c.proc.kill('SIGTERM');
  const timer = setTimeout(() => c.proc.kill('SIGKILL'), 10_000);
  await done;
  clearTimeout(timer);
}

class AheadClock implements Clock {
  constructor(private readonly aheadMs: number) {}
  nowMs(): number {
    return Date.now() + this.aheadMs;
  }
  nowIso(): string {
    return isoMicros(this.nowMs());
  }
}

for (const driver of DRIVERS) {
  t.test(`${driver}: delivery durability across processes`, async (t) => {
    const rx: Receiver = await startReceiver();
    t.teardown(() => rx.close());
    const dir = mkdtempSync(join(tmpdir(), 'wh-dur-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    const keyFile = testMasterKeyFile(dir);
    const db: FreshDb = await freshDb(driver);
    t.teardown(() => db.drop());
    const env = (extra: Record<string, string> = {}): Record<string, string> => ({
      DATABASE_URL: db.url,
      CAPSULE_DATA_DIR: mkdtempSync(join(dir, 'data-')),
      CAPSULE_MASTER_KEY_FILE: keyFile,
      CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
      CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile,
      CAPSULE_WEBHOOK_POLL_MS: '20',
      ...extra,
    });

    await t.test('two processes on one database deliver each attempt once', async (t) => {
      const a = await spawnCp(env({ CAPSULE_WEBHOOK_CONCURRENCY: '8', CAPSULE_WEBHOOK_PER_ENDPOINT: '8' }));
      const b = await spawnCp(env({ CAPSULE_WEBHOOK_CONCURRENCY: '8', CAPSULE_WEBHOOK_PER_ENDPOINT: '8' }));
      t.teardown(() => Promise.all([stop(a), stop(b)]));
      const u = await a.api.signup();
      const w = await b.api.req('POST', '/v1/webhooks', {
        key: u.key,
        json: { url: `${rx.base}/twice`, events: ['webhook.test'] },
      });
      t.equal(w.status, 201, w.text);
      rx.secrets.set('/twice', w.body.signing_secret);
      rx.modes.set('/twice', { delayMs: 5, status: 200 });
      // 200 events committed straight into the outbox by a third writer; both workers race for them.
      const stores = await openStores(
        driver === 'sqlite' ? { driver, file: db.url.slice(5) } : { driver, url: db.url },
      );
      t.teardown(() => stores.store.close());
      const N = 200;
      const ids: string[] = [];
      for (let i = 0; i < N; i++) {
        const id = `evt_dup${String(i).padStart(8, '0')}`;
        ids.push(id);
        const at = isoMicros(Date.now());
        await stores.webhooks.insertDirectEvent(
          {
            id,
            customer_id: u.customer_id,
            type: 'webhook.test',
            created_at: at,
            payload: JSON.stringify({ id, type: 'webhook.test', created_at: at, data: { n: i } }),
          },
          w.body.id,
        );
      }
      await rx.waitFor((r) => new Set(r.filter((x) => x.path === '/twice').map((x) => x.id)).size === N, 30_000);
      await new Promise((r) => setTimeout(r, 500));
      const got = rx.received.filter((x) => x.path === '/twice');
      t.equal(got.length, N, 'each event received exactly once');
      t.ok(
        got.every((x) => x.verified === true),
        'every delivery signed',
      );
      const rows = await dbQuery(
        driver,
        db,
        'select "status", "attempt_number", count(*) as "n" from "webhook_deliveries" where "endpoint_id" = ? group by "status", "attempt_number"',
        [w.body.id],
      );
      t.same(
        rows.map((r) => [r.status, Number(r.attempt_number), Number(r.n)]),
        [['succeeded', 1, N]],
        'one succeeded attempt per event, no retry row',
      );
    });

    await t.test('two stores on separate connections claiming at once never share a row', async (t) => {
      const dbc =
        driver === 'sqlite' ? ({ driver, file: db.url.slice(5) } as const) : ({ driver, url: db.url } as const);
      const one = await openStores(dbc);
      const two = await openStores(dbc);
      t.teardown(async () => {
        await one.store.close();
        await two.store.close();
      });
      const u = await one.store.createAccount({
        customer_id: 'cus_claimrace',
        email: 'claim-race@example.com',
        tier: 'free',
        jurisdiction: 'EU',
        key_hash: 'f'.repeat(64),
        key_id: 'key_claimrace',
        key_prefix: 'svc_live_',
        key_mode: 'live',
        created_at: isoMicros(Date.now()),
        billing_cycle_start: isoMicros(Date.now()),
      });
      const now = isoMicros(Date.now());
      const endpoints = ['whse_' + 'a'.repeat(24), 'whse_' + 'b'.repeat(24), 'whse_' + 'c'.repeat(24)];
      for (const id of endpoints)
        await one.webhooks.insertEndpoint(
          {
            id,
            customer_id: u.customer_id,
            url: 'https://127.0.0.1:9/x',
            events: ['webhook.test'],
            description: '',
            active: true,
            secret_sealed: 'x',
            created_at: now,
            updated_at: now,
          },
          20,
        );
      const N = 300;
      for (let i = 0; i < N; i++)
        await one.webhooks.insertDirectEvent(
          {
            id: `evt_race${String(i).padStart(8, '0')}`,
            customer_id: u.customer_id,
            type: 'webhook.test',
            created_at: now,
            payload: '{}',
          },
          endpoints[i % 3]!,
        );
      const later = isoMicros(Date.now() + 1000);
      const take = async (s: typeof one, owner: string): Promise<string[]> => {
        const got: string[] = [];
        // Like the worker: an empty claim (another process holds the due rows) polls again shortly.
        for (let empty = 0; empty < 5;) {
          const c = await s.webhooks.claimDue({
            owner,
            nowIso: later,
            leaseUntilIso: isoMicros(Date.now() + 600_000),
            limit: 7,
            perEndpoint: 3,
            skipEndpoints: [],
          });
          if (c.length === 0) {
            empty++;
            await new Promise((r) => setTimeout(r, 5));
          } else {
            empty = 0;
            got.push(...c.map((x) => x.id));
          }
        }
        return got;
      };
      const [x, y] = await Promise.all([take(one, 'wkr_one'), take(two, 'wkr_two')]);
      const both = new Set([...x, ...y]);
      t.equal(both.size, N, 'every pending attempt claimed');
      t.equal(x.length + y.length, N, 'no attempt claimed twice');
      t.ok(x.length > 0 && y.length > 0, `both claimed (${x.length} / ${y.length})`);
    });

    await t.test('a slow receiver holds only its own slots: another account is not delayed', async (t) => {
      rx.modes.set('/slow', 'hang');
      rx.modes.set('/fast', 200);
      const s = await start(driver, noRunner, env({ CAPSULE_WEBHOOK_TIMEOUT_MS: '3000' }), db);
      t.teardown(s.close);
      const slowU = await s.api.signup();
      const fastU = await s.api.signup();
      const mk = async (key: string, path: string): Promise<string> => {
        const r = await s.api.req('POST', '/v1/webhooks', {
          key,
          json: { url: `${rx.base}${path}`, events: ['webhook.test'] },
        });
        return r.body.id;
      };
      const slowId = await mk(slowU.key, '/slow');
      const fastId = await mk(fastU.key, '/fast');
      const stores = await openStores(
        driver === 'sqlite' ? { driver, file: db.url.slice(5) } : { driver, url: db.url },
      );
      t.teardown(() => stores.store.close());
      const put = async (customer: string, endpoint: string, id: string): Promise<void> => {
        const at = isoMicros(Date.now());
        await stores.webhooks.insertDirectEvent(
          { id, customer_id: customer, type: 'webhook.test', created_at: at, payload: `{"id":"${id}"}` },
          endpoint,
        );
      };
      for (let i = 0; i < 40; i++) await put(slowU.customer_id, slowId, `evt_slow${String(i).padStart(6, '0')}`);
      await rx.waitFor((r) => r.filter((x) => x.path === '/slow').length >= 2);
      const sent = Date.now();
      await put(fastU.customer_id, fastId, 'evt_fast000001');
      await rx.waitFor((r) => r.some((x) => x.path === '/fast'), 2000);
      const fast = rx.received.find((x) => x.path === '/fast')!;
      t.ok(fast.at - sent < 500, `the other account's event arrived ${fast.at - sent} ms after its commit`);
      t.equal(
        rx.received.filter((x) => x.path === '/slow').length,
        2,
        'at most CAPSULE_WEBHOOK_PER_ENDPOINT (2) attempts in flight to the slow endpoint',
      );
      await s.close();
    });

    await t.test('SIGKILL mid-delivery: the next process redelivers the same evt_ id', async (t) => {
      rx.modes.set('/kill', 'hang');
      const c = await spawnCp(env({ CAPSULE_WEBHOOK_TIMEOUT_MS: '30000' }));
      const u = await c.api.signup();
      const w = await c.api.req('POST', '/v1/webhooks', {
        key: u.key,
        json: { url: `${rx.base}/kill`, events: ['webhook.test'] },
      });
      rx.secrets.set('/kill', w.body.signing_secret);
      void c.api.req('POST', `/v1/webhooks/${w.body.id}/test`, { key: u.key }).catch(() => null);
      await rx.waitFor((r) => r.some((x) => x.path === '/kill'));
      await kill9(c);
      const first = rx.received.find((x) => x.path === '/kill')!;
      const pending = await dbQuery(driver, db, 'select "status" from "webhook_deliveries" where "event_id" = ?', [
        first.id,
      ]);
      t.same(
        pending.map((r) => r.status),
        ['pending'],
        'the attempt is still pending after the kill',
      );
      rx.modes.set('/kill', 200);
      // A process whose clock is past the dead process's lease picks the attempt up.
      const clock = new AheadClock(5 * 60_000);
      rx.nowS = () => Math.floor(clock.nowMs() / 1000);
      const s = await start(driver, noRunner, env(), db, { clock });
      t.teardown(s.close);
      await rx.waitFor((r) => r.filter((x) => x.path === '/kill').length === 2, 10_000);
      const second = rx.received.filter((x) => x.path === '/kill')[1]!;
      t.equal(second.id, first.id, 'same Svc-Webhook-Id');
      t.equal(second.body.id, first.body.id);
      t.equal(second.raw, first.raw, 'same payload bytes');
      t.equal(second.verified, true);
      rx.nowS = () => Math.floor(Date.now() / 1000);
      await s.close();
    });

    await t.test('SIGKILL between commit and delivery: nothing is lost', async (t) => {
      // This process commits events but runs no delivery worker.
      const c = await spawnCp(env({ CAPSULE_WEBHOOK_CONCURRENCY: '0' }));
      const u = await c.api.signup();
      const w = await c.api.req('POST', '/v1/webhooks', {
        key: u.key,
        json: { url: `${rx.base}/commit`, events: ['capsulefile.finalized'] },
      });
      rx.secrets.set('/commit', w.body.signing_secret);
      const cf = await c.api.req('POST', '/v1/capsulefiles', {
        key: u.key,
        json: { name: 'kill-me', runtime: 'python3', entrypoint: 'python3 /capsule/app/main.py' },
      });
      t.equal(cf.status, 201, cf.text);
      const fin = await c.api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: u.key });
      t.equal(fin.status, 200, fin.text);
      await kill9(c);
      await new Promise((r) => setTimeout(r, 100));
      t.equal(rx.received.filter((x) => x.path === '/commit').length, 0, 'not delivered before the kill');
      const s = await start(driver, noRunner, env(), db);
      t.teardown(s.close);
      await rx.waitFor((r) => r.some((x) => x.path === '/commit'), 10_000);
      const got = rx.received.filter((x) => x.path === '/commit');
      t.equal(got.length, 1);
      t.equal(got[0]!.body.data.capsulefile_id, cf.body.id);
      t.equal(got[0]!.verified, true);
    });
  });
}
