// `npm run bench:webhooks`: webhook deliveries to a local HTTPS receiver
// (real TLS, test CA) through the whole path (outbox row committed, worker
// woken as the services do, leased claim, sign, send, record), beside a bare
// loop of signed https.request calls to the same receiver at the same
// concurrency, in the same run. Prints deliveries per second of both and
// their ratio, p50/p99 latency from the commit of the state change to the
// receiver, and the same latency for one account while another account's
// receiver hangs (10 s timeouts). Figures are printed, never asserted.
//   flags: --events=2000 --drivers=sqlite,postgresql --concurrency=2,16
import { createHmac } from 'node:crypto';
import { Agent, request } from 'node:https';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { monitorEventLoopDelay, performance } from 'node:perf_hooks';
import { isoMicros } from '../shared/time.js';
import { RunnerClient } from '../shared/node/runner-client.js';
import { openStores, type Stores } from '../control-plane/store/index.js';
import { dbQuery, start, type Driver } from '../test/control-plane/harness.js';
import { startReceiver, type Receiver } from '../test/webhooks/receiver.js';

const arg = (name: string, dflt: string): string =>
  process.argv.find((x) => x.startsWith(`--${name}=`))?.slice(name.length + 3) ?? dflt;
const EVENTS = Number(arg('events', '2000'));
const DRIVERS = arg('drivers', 'sqlite,postgresql').split(',') as Driver[];
const CONCURRENCY = arg('concurrency', '2,16').split(',').map(Number);
const noRunner = new RunnerClient(join(tmpdir(), `bench-wh-no-runner-${process.pid}.sock`));

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};
const f1 = (x: number): string => x.toFixed(1);

/** The baseline: `n` signed POSTs of the same size, `conc` at a time, over one keep-alive agent. */
async function bareLoop(rx: Receiver, n: number, conc: number): Promise<number> {
  const agent = new Agent({ keepAlive: true, maxSockets: conc, ca: readFileSync(rx.caFile, 'utf8') });
  const secret = `whsec_${'ab'.repeat(32)}`;
  let next = 0;
  const t0 = performance.now();
  const one = (i: number): Promise<void> =>
    new Promise((resolve, reject) => {
      const body = JSON.stringify({
        id: `evt_bare${i}`,
        type: 'webhook.test',
        created_at: isoMicros(Date.now()),
        data: { n: i },
      });
      const ts = Math.floor(Date.now() / 1000);
      const sig = createHmac('sha256', secret).update(`${ts}.${body}`).digest('hex');
      const req = request(
        `${rx.base}/bare`,
        {
          method: 'POST',
          agent,
          headers: {
            'content-type': 'application/json',
            'content-length': Buffer.byteLength(body),
            'Svc-Webhook-Id': `evt_bare${i}`,
            'Svc-Webhook-Signature': `t=${ts},v1=${sig}`,
          },
        },
        (res) => {
          res.resume();
          res.on('end', () => resolve());
        },
      );
      req.on('error', reject);
      req.end(body);
    });
  await Promise.all(
    Array.from({ length: conc }, async () => {
      while (next < n) await one(next++);
    }),
  );
  const s = (performance.now() - t0) / 1000;
  agent.destroy();
  return n / s;
}

async function commit(stores: Stores, customer: string, endpoint: string, id: string): Promise<number> {
  const at = isoMicros(Date.now());
  await stores.webhooks.insertDirectEvent(
    {
      id,
      customer_id: customer,
      type: 'webhook.test',
      created_at: at,
      payload: JSON.stringify({ id, type: 'webhook.test', created_at: at, data: {} }),
    },
    endpoint,
  );
  return Date.now();
}

async function run(driver: Driver, conc: number): Promise<void> {
  const rx = await startReceiver();
  const s = await start(driver, noRunner, {
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
    CAPSULE_WEBHOOK_EXTRA_CA: rx.caFile,
    CAPSULE_WEBHOOK_CONCURRENCY: String(Math.max(16, conc * 2)),
    CAPSULE_WEBHOOK_PER_ENDPOINT: String(conc),
    // No polling: the worker wakes only when kicked, as the services kick it after a commit.
    CAPSULE_WEBHOOK_POLL_MS: '60000',
  });
  const stores = await openStores(
    driver === 'sqlite' ? { driver, file: s.db.url.slice(5) } : { driver, url: s.db.url },
  );
  try {
    const kick = (): void => s.cp.services.webhookWorker.kick();
    const mk = async (path: string): Promise<{ customer: string; endpoint: string }> => {
      const u = await s.api.signup();
      const r = await s.api.req('POST', '/v1/webhooks', {
        key: u.key,
        json: { url: `${rx.base}${path}`, events: ['webhook.test'] },
      });
      return { customer: u.customer_id, endpoint: r.body.id };
    };
    const a = await mk('/a');
    // Throughput: every event committed first, then the worker drains them.
    for (let i = 0; i < EVENTS; i++) await commit(stores, a.customer, a.endpoint, `evt_t${i}`);
    const loopDelay = monitorEventLoopDelay({ resolution: 5 });
    loopDelay.enable();
    const t0 = performance.now();
    kick();
    await rx.waitFor((r) => r.filter((x) => x.path === '/a').length >= EVENTS, 600_000);
    const rate = EVENTS / ((performance.now() - t0) / 1000);
    const conns = rx.connections;
    loopDelay.disable();
    const lagMs = loopDelay.mean / 1e6;
    const bare = await bareLoop(rx, EVENTS, conc);
    const sendMs = (
      await dbQuery(
        driver,
        s.db,
        'select avg("duration_ms") as "ms" from "webhook_deliveries" where "endpoint_id" = ?',
        [a.endpoint],
      )
    )[0].ms;
    // Latency: one event every 10 ms, commit to receiver.
    const lat = async (path: string, ep: { customer: string; endpoint: string }, n: number): Promise<number[]> => {
      const sentAt = new Map<string, number>();
      for (let i = 0; i < n; i++) {
        const id = `evt_l${path.slice(1)}${i}`;
        sentAt.set(id, await commit(stores, ep.customer, ep.endpoint, id));
        kick();
        await new Promise((r) => setTimeout(r, 10));
      }
      await rx.waitFor((r) => r.filter((x) => x.path === path).length >= n, 60_000);
      return rx.received.filter((x) => x.path === path).map((x) => x.at - (sentAt.get(x.id) ?? x.at));
    };
    const quiet = await lat('/l', await mk('/l'), 200);
    // The same while another account's receiver hangs with 50 events queued (10 s timeouts).
    rx.modes.set('/hang', 'hang');
    const h = await mk('/hang');
    for (let i = 0; i < 50; i++) await commit(stores, h.customer, h.endpoint, `evt_h${i}`);
    kick();
    await rx.waitFor((r) => r.some((x) => x.path === '/hang'), 5000);
    const busy = await lat('/m', await mk('/m'), 200);
    console.log(
      `${driver.padEnd(10)} per-endpoint ${String(conc).padStart(2)}: ${f1(rate)} deliveries/s vs bare ${f1(bare)}/s = ${(rate / bare).toFixed(2)}x;` +
        ` (mean send ${Number(sendMs).toFixed(1)} ms, event-loop delay mean ${lagMs.toFixed(1)} ms, ${conns} TLS connections);` +
        ` commit->receiver p50 ${pct(quiet, 50)} ms p99 ${pct(quiet, 99)} ms;` +
        ` with another account's receiver hanging p50 ${pct(busy, 50)} ms p99 ${pct(busy, 99)} ms`,
    );
  } finally {
    await stores.store.close();
    await rx.close();
    await s.close();
  }
}

for (const driver of DRIVERS) for (const conc of CONCURRENCY) await run(driver, conc);
