// `npm run bench:api`: control plane over HTTP on loopback against a real
// runner, on SQLite and PostgreSQL. Prints p50/p99 of create, exec `true`,
// destroy and the full create->upload->exec->download->destroy->verify round
// trip; POST /v1/verify throughput with rate limiting off; 50 capsules driven
// concurrently. Figures are printed, never asserted.
//   flags: --iter=100 --verify-seconds=5 --concurrent=50 --drivers=sqlite,postgresql
import { rmSync } from 'node:fs';
import http from 'node:http';
import { performance } from 'node:perf_hooks';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import { pino } from 'pino';
import { startControlPlane } from '../control-plane/server.js';
import { startRunner } from '../test/helpers/runner.js';
import { Api, freshDb, testConfig, type Driver, type Res } from '../test/control-plane/harness.js';
import { bareBwrapMs } from './bare-bwrap.js';

const argNum = (name: string, dflt: number): number => {
  const a = process.argv.find((x) => x.startsWith(`--${name}=`));
  return a ? Number(a.slice(name.length + 3)) : dflt;
};
const ITER = argNum('iter', 100);
const VERIFY_SECONDS = argNum('verify-seconds', 5);
const CONCURRENT = argNum('concurrent', 50);
const driversArg = process.argv.find((x) => x.startsWith('--drivers='));
const DRIVERS = (driversArg ? driversArg.slice(10).split(',') : ['sqlite', 'postgresql']) as Driver[];

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
}
const fmt = (xs: number[]): string =>
  `p50 ${pct(xs, 50).toFixed(1)} ms  p99 ${pct(xs, 99).toFixed(1)} ms  (n=${xs.length})`;

async function timed<T>(out: number[], f: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  const r = await f();
  out.push(performance.now() - t0);
  return r;
}

function must(r: { status: number; text: string }, status: number, what: string): void {
  if (r.status !== status) throw new Error(`${what}: ${r.status} ${r.text.slice(0, 300)}`);
}

async function benchDriver(driver: Driver): Promise<void> {
  const runner = await startRunner({ options: { max_capsules: '128' } });
  const db = await freshDb(driver);
  const config = testConfig(db.url, { CAPSULE_RATE_LIMITS: 'off' });
  const cp = await startControlPlane(config, runner.client, { logger: pino({ level: 'silent' }) });
  try {
    const { key, email } = await new Api(cp.url).signup();
    const api = new LeanClient(cp.url);
    await cp.store.setTierByEmail(email, 'enterprise'); // no quota or concurrency cap in the way
    const create: number[] = [],
      exec: number[] = [],
      destroy: number[] = [],
      round: number[] = [];
    const payload = Buffer.alloc(4096, 'x');
    // The baseline interleaved with the series it is compared with, so that both meet the same load.
    const bare: number[] = [];
    await bareBwrapMs(0);
    // warm-up
    for (let i = 0; i < 5; i++) {
      const c = await api.req('POST', '/v1/capsules', { key, json: {} });
      await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
    }
    for (let i = 0; i < ITER; i++) {
      const c = await timed(create, () => api.req('POST', '/v1/capsules', { key, json: {} }));
      must(c, 201, 'create');
      must(
        await timed(exec, () => api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command: 'true' } })),
        200,
        'exec',
      );
      must(await timed(destroy, () => api.req('DELETE', `/v1/capsules/${c.body.id}`, { key })), 200, 'destroy');
      bare.push(...(await bareBwrapMs(1, 0)));
    }
    const proofs: unknown[] = [];
    const STEPS = ['create', 'upload', 'exec', 'download', 'destroy', 'verify'] as const;
    const steps = Object.fromEntries(STEPS.map((s) => [s, [] as number[]])) as Record<(typeof STEPS)[number], number[]>;
    for (let i = 0; i < ITER; i++) {
      await timed(round, async () => {
        const c = await timed(steps.create, () => api.req('POST', '/v1/capsules', { key, json: {} }));
        must(c, 201, 'create');
        const id = c.body.id as string;
        must(
          await timed(steps.upload, () =>
            api.req('POST', `/v1/capsules/${id}/upload?filename=in.bin`, { key, raw: payload }),
          ),
          200,
          'upload',
        );
        must(
          await timed(steps.exec, () =>
            api.req('POST', `/v1/capsules/${id}/exec`, {
              key,
              json: { command: 'cp /data/input/in.bin /data/output/out.bin' },
            }),
          ),
          200,
          'exec',
        );
        must(
          await timed(steps.download, () => api.req('GET', `/v1/capsules/${id}/output/out.bin`, { key })),
          200,
          'download',
        );
        const d = await timed(steps.destroy, () => api.req('DELETE', `/v1/capsules/${id}`, { key }));
        must(d, 200, 'destroy');
        const v = await timed(steps.verify, () => api.req('POST', '/v1/verify', { json: { cdp: d.body.audit_proof } }));
        if (v.body?.valid !== true) throw new Error(`verify: ${v.text}`);
        proofs.push(d.body.audit_proof);
      });
    }
    // The runner alone (same host, same run), to separate the control plane's share.
    const rc: number[] = [],
      re: number[] = [],
      rd: number[] = [];
    for (let i = 0; i < ITER; i++) {
      const id = `cap_bench${i}`;
      await timed(rc, () => runner.client.create({ capsule_id: id, memory_mb: 256 }));
      await timed(re, () => runner.client.exec({ capsule_id: id, command: 'true', timeout_ms: 60_000 }));
      await timed(rd, () => runner.client.destroy(id));
    }
    console.log(`\n[${driver}] ${ITER} iterations, one at a time`);
    console.log(
      `  runner alone: create p50 ${pct(rc, 50).toFixed(1)}, exec true p50 ${pct(re, 50).toFixed(1)}, destroy p50 ${pct(rd, 50).toFixed(1)} ms`,
    );
    console.log(`  create                     ${fmt(create)}`);
    console.log(`  exec true                  ${fmt(exec)}`);
    console.log(
      `  bare bwrap true            ${fmt(bare)}  (one after each exec iteration; exec true p50 = ${(pct(exec, 50) / pct(bare, 50)).toFixed(2)}x)`,
    );
    console.log(`  destroy (proof signed)     ${fmt(destroy)}`);
    console.log(`  full round trip            ${fmt(round)}`);
    console.log(
      `    (${STEPS.map((s) => `${s} ${pct(steps[s], 50).toFixed(1)}`).join(' -> ')} ms p50; exec is a cp of the upload)`,
    );

    // POST /v1/verify throughput, 32 requests in flight from a worker thread
    // (so the load generator does not share the server's event loop), rate limiting off.
    const { n, bad } = await new Promise<{ n: number; bad: number }>((resolve, reject) => {
      const w = new Worker(new URL(import.meta.url), {
        workerData: {
          url: `${cp.url}/v1/verify`,
          bodies: proofs.map((p) => JSON.stringify({ cdp: p })),
          seconds: VERIFY_SECONDS,
        },
      });
      w.once('message', resolve);
      w.once('error', reject);
    });
    console.log(
      `  POST /v1/verify            ${(n / VERIFY_SECONDS).toFixed(0)} verifications/s over ${VERIFY_SECONDS} s (32 in flight from a worker, ${proofs.length} distinct proofs, ${bad} not valid)`,
    );

    // 50 capsules driven concurrently: create -> exec -> destroy each, count errors.
    const errors: string[] = [];
    const t0 = performance.now();
    await Promise.all(
      Array.from({ length: CONCURRENT }, async (_, i) => {
        try {
          const c = await api.req('POST', '/v1/capsules', { key, json: {} });
          must(c, 201, 'create');
          must(
            await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command: `echo ${i}` } }),
            200,
            'exec',
          );
          const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
          must(d, 200, 'destroy');
        } catch (e) {
          errors.push((e as Error).message);
        }
      }),
    );
    console.log(
      `  ${CONCURRENT} concurrent capsules     ${errors.length} errors, all done in ${(performance.now() - t0).toFixed(0)} ms${errors.length ? `: ${errors[0]}` : ''}`,
    );
  } finally {
    await cp.close();
    await runner.stop();
    await db.drop();
    rmSync(config.dataDir, { recursive: true, force: true });
  }
}

/**
 * The timed requests' client: keep-alive node:http, like an SDK or curl in another process would
 * cost the server nothing. The suites' client (test/control-plane/harness.ts) goes through fetch and
 * checks every answer against the OpenAPI document, about 0.4 ms per request on this machine, all of
 * it on the server's event loop here since both live in this process.
 */
class LeanClient {
  private readonly agent = new http.Agent({ keepAlive: true, maxSockets: 64 });
  constructor(private readonly base: string) {}

  req(
    method: string,
    path: string,
    opts: { key?: string; json?: unknown; raw?: Uint8Array } = {},
  ): Promise<Pick<Res, 'status' | 'text' | 'body'>> {
    const body =
      opts.json !== undefined ? Buffer.from(JSON.stringify(opts.json)) : opts.raw ? Buffer.from(opts.raw) : null;
    const headers: Record<string, string | number> = {};
    if (opts.key) headers['authorization'] = `Bearer ${opts.key}`;
    if (opts.json !== undefined) headers['content-type'] = 'application/json';
    if (body) headers['content-length'] = body.length;
    return new Promise((resolve, reject) => {
      const r = http.request(this.base + path, { method, agent: this.agent, headers }, (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          let parsed: unknown;
          try {
            parsed = JSON.parse(text);
          } catch {
            /* a download's raw bytes */
          }
          resolve({ status: res.statusCode ?? 0, text, body: parsed });
        });
      });
      r.on('error', reject);
      r.end(body ?? undefined);
    });
  }
}

/**
 * Cycles through distinct proofs (distinct ephemeral keys, as in real
 * traffic) over keep-alive node:http (fetch costs the client more CPU than
 * the server spends per verification on this 2-core machine).
 */
async function verifyLoad(url: string, bodies: string[], seconds: number): Promise<{ n: number; bad: number }> {
  const u = new URL(url);
  const agent = new http.Agent({ keepAlive: true, maxSockets: 32 });
  const post = (body: Buffer): Promise<boolean> =>
    new Promise((resolve, reject) => {
      const r = http.request(
        {
          host: u.hostname,
          port: u.port,
          path: u.pathname,
          method: 'POST',
          agent,
          headers: { 'content-type': 'application/json', 'content-length': body.length },
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (c: Buffer) => chunks.push(c));
          res.on('end', () =>
            resolve((JSON.parse(Buffer.concat(chunks).toString('utf8')) as { valid?: boolean }).valid === true),
          );
        },
      );
      r.on('error', reject);
      r.end(body);
    });
  const bufs = bodies.map((b) => Buffer.from(b));
  let n = 0,
    bad = 0,
    i = 0;
  const until = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: 32 }, async () => {
      while (performance.now() < until) {
        if (await post(bufs[i++ % bufs.length]!)) n++;
        else bad++;
      }
    }),
  );
  agent.destroy();
  return { n, bad };
}

if (isMainThread) {
  const { loadavg } = await import('node:os');
  console.log(
    `bench:api  node ${process.version}  ${new Date().toISOString()}  load average ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
  for (const d of DRIVERS) await benchDriver(d);
  console.log(
    `load average at the end ${loadavg()
      .map((x) => x.toFixed(1))
      .join(' ')}`,
  );
} else {
  const w = workerData as { url: string; bodies: string[]; seconds: number };
  parentPort?.postMessage(await verifyLoad(w.url, w.bodies, w.seconds));
}
