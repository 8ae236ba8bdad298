// Hostile capsules against the sealed egress layer, through the public API
// with real runner capsules, real TLS and a real upstream on loopback:
// - a stream of hundreds of thousands of tiny server-sent events (trail,
//   memory and another tenant's latency stay bounded; the segment roots
//   verify against the bytes);
// - many slow uploads from one capsule (buffered bytes bounded by the
//   capsule's and the process's inspection budgets, refusals in HTTP,
//   another capsule's egress unaffected).
import t from 'tap';
import { createHash } from 'node:crypto';
import { spawn } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { pino } from 'pino';
import { merkleRoot, verifyProof } from '../../shared/proof/index.js';
import { combineSegmentRoots } from '../../egress-proxy/index.js';
import { StreamChunker } from '../../egress-proxy/sse.js';
import { startControlPlane } from '../../control-plane/server.js';
import { Api, freshDb, testConfig } from '../control-plane/harness.js';
import { startRunner } from '../helpers/runner.js';
import { fakeResolver, makePki, tempDir } from '../egress/fixtures.js';
import { floodBatch } from './hostile-upstream.js';

type Ev = { seq: number; type: string; at: string; [k: string]: any };

const SSE_EVENTS = 400_000;
/** The flood body: 400,000 events "data: D\n\n" (9 bytes each), 3.6 MB. */
const floodBytes = (): Buffer => floodBatch(0, SSE_EVENTS);

const pct = (xs: number[], p: number): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

t.test('hostile capsules against sealed egress', async (t) => {
  const pki = makePki(['flood.test', 'api.test']);
  const dir = tempDir('egress-hostile-');
  t.teardown(dir.remove);
  const caFile = dir.write('test-ca.pem', pki.caPem);
  const upstream = spawn(
    process.execPath,
    [fileURLToPath(new URL('./hostile-upstream.js', import.meta.url)), 'serve'],
    {
      env: {
        ...process.env,
        KEY_FILE: dir.write('k.pem', pki.serverKey),
        CERT_FILE: dir.write('c.pem', pki.serverCert),
      },
      stdio: ['ignore', 'pipe', 'inherit'],
    },
  );
  t.teardown(() => upstream.kill());
  const port = await new Promise<number>((resolve, reject) => {
    upstream.stdout.once('data', (d: Buffer) => resolve(Number(String(d).trim())));
    upstream.once('exit', () => reject(new Error('upstream exited')));
  });
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const db = await freshDb('sqlite');
  const cp = await startControlPlane(
    testConfig(db.url, { CAPSULE_RATE_LIMITS: 'off', CAPSULE_EGRESS_EXTRA_CA: caFile }),
    runner.client,
    {
      logger: pino({ level: 'silent' }),
      egress: { resolver: fakeResolver({ 'flood.test': '127.0.0.1', 'api.test': '127.0.0.1' }) },
    },
  );
  t.teardown(async () => {
    await cp.close();
    await db.drop();
  });
  const api = new Api(cp.url);

  // The attacker: a Team account with a profile and a Capsulefile naming the upstream.
  const bad = await api.signup();
  await cp.store.setTierByEmail(bad.email, 'business');
  const prof = await api.req('POST', '/v1/egress/profiles', { key: bad.key, json: { name: 'flood' } });
  t.equal(prof.status, 201, prof.text);
  for (const [kind, value] of [
    ['domain', 'flood.test'],
    ['domain', 'api.test'],
    ['ip_v4', '127.0.0.1'],
  ] as const) {
    const r = await api.req('POST', `/v1/egress/profiles/${prof.body.id}/rules`, {
      key: bad.key,
      json: { kind, value, port },
    });
    t.equal(r.status, 201, r.text);
  }
  const cf = await api.req('POST', '/v1/capsulefiles', {
    key: bad.key,
    json: {
      name: 'flood',
      runtime: 'sh',
      entrypoint: 'true',
      egress_declaration: ['flood.test', 'api.test', '127.0.0.1'],
    },
  });
  t.equal(cf.status, 201, cf.text);
  t.equal((await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: bad.key })).status, 200);
  const exec = async (key: string, id: string, command: string, timeout = 120) => {
    const r = await api.req('POST', `/v1/capsules/${id}/exec`, { key, json: { command, timeout } });
    if (r.status !== 200) throw new Error(`exec ${r.status}: ${r.text}`);
    return r.body as { stdout: string; stderr: string; exit_code: number };
  };

  // The other tenant: its own account and capsule; its latency is measured idle, then under attack.
  const good = await api.signup();
  const gc = await api.req('POST', '/v1/capsules', { key: good.key, json: { ttl: 600 } });
  t.equal(gc.status, 201, gc.text);
  const goodId = gc.body.id as string;
  const timed = async (): Promise<number> => {
    const t0 = performance.now();
    const r = await api.req('GET', `/v1/capsules/${goodId}`, { key: good.key });
    if (r.status !== 200) throw new Error(`other tenant got ${r.status}`);
    return performance.now() - t0;
  };
  const idle: number[] = [];
  for (let i = 0; i < 40; i++) idle.push(await timed());

  await t.test('400,000 tiny SSE events in one response', async (t) => {
    const c = await api.req('POST', '/v1/capsules', {
      key: bad.key,
      json: { ttl: 600, capsulefile_id: cf.body.id, egress_profile_id: prof.body.id },
    });
    t.equal(c.status, 201, c.text);
    const id = c.body.id as string;
    // Another tenant's GET latency while `work` runs, and the control plane's peak RSS growth.
    const during = async <R>(work: () => Promise<R>) => {
      const rss0 = process.memoryUsage().rss;
      let peak = rss0;
      const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 20);
      let running = true;
      const lat: number[] = [];
      const other = (async () => {
        while (running) {
          lat.push(await timed());
          await new Promise((r) => setTimeout(r, 10));
        }
      })();
      const t0 = performance.now();
      const result = await work();
      const ms = performance.now() - t0;
      running = false;
      await other;
      clearInterval(sampler);
      return { result, ms, lat, grewMb: (peak - rss0) / 1024 / 1024 };
    };
    // Baseline: the same 3.6 MB as a plain download (what any tenant may do), then the flood of events.
    const benign = await during(() =>
      exec(bad.key, id, `curl -sS -m 100 https://flood.test:${port}/bytes?n=${SSE_EVENTS} | sha512sum`),
    );
    const attack = await during(() =>
      exec(bad.key, id, `curl -sS -N -m 100 https://flood.test:${port}/flood?n=${SSE_EVENTS} | sha512sum`),
    );
    const r = attack.result;
    const body = floodBytes();
    const bodyHex = createHash('sha512').update(body).digest('hex');
    t.equal(r.exit_code, 0, r.stderr);
    t.equal(r.stdout.split(' ')[0], bodyHex, 'the capsule received every byte');
    t.equal(benign.result.stdout.split(' ')[0], bodyHex);

    const d = await api.req('DELETE', `/v1/capsules/${id}`, { key: bad.key });
    t.equal(d.status, 200, d.text.slice(0, 300));
    t.ok(d.bytes.length < 1024 * 1024, `destroy response ${d.bytes.length} bytes (was 107 MB)`);
    const cdp = d.body.cdp as { activity: Ev[] };
    t.equal(verifyProof(cdp).valid, true, 'AuditProof verified');
    const act = cdp.activity;
    // The flood is the second exchange (the benign download is the first).
    const sealed = act.filter((e) => e.type === 'SealedHttpRequest')[1]!;
    const segs = act.filter((e) => e.type === 'StreamingEgressChunk' && e.exchange === sealed.exchange);
    const done = act.find((e) => e.type === 'StreamingEgressCompleted' && e.exchange === sealed.exchange)!;
    t.ok(act.length < 200, `whole trail ${act.length} events (was 400,000+)`);
    t.ok(segs.length <= 4 * Math.floor(Math.log2(done.chunks)) + 4, `${segs.length} segment events`);
    t.ok(done.chunks < SSE_EVENTS / 400, `tiny events share chunks of at least 4 KiB: ${done.chunks} chunks`);
    t.equal(done.segments, segs.length);
    t.equal(done.total_bytes, body.length);
    t.equal(done.outcome, 'completed');
    t.equal(sealed.response_body_hash, `sha512:${bodyHex}`);
    t.notOk(
      act.some((e) => e.type === 'ActivityTruncated'),
      'nothing dropped: a stream no longer floods the queue',
    );

    // Verify against the bytes: re-cut the chunks, recompute the root and every segment root.
    const digests: Buffer[] = [];
    const ch = new StreamChunker({ sse: true, maxChunkBytes: 1024 * 1024, minChunkBytes: 4096 }, (x) =>
      digests.push(x.digest),
    );
    ch.write(body);
    ch.end();
    t.equal(digests.length, done.chunks);
    const root = `sha512:${Buffer.from(merkleRoot(digests)).toString('hex')}`;
    t.equal(done.merkle_root, root, 'merkle_root is RFC 6962 over the chunk digests of the bytes');
    const fromSegs = combineSegmentRoots(
      segs.map((s) => ({
        firstChunk: s.first_chunk,
        chunks: s.chunks,
        root: Buffer.from(s.segment_root.slice(7), 'hex'),
      })),
    );
    t.equal(`sha512:${fromSegs.toString('hex')}`, root, 'the segment roots fold into it');
    const wrong = segs.filter(
      (s) =>
        s.segment_root !==
        `sha512:${Buffer.from(merkleRoot(digests.slice(s.first_chunk, s.first_chunk + s.chunks))).toString('hex')}`,
    );
    t.equal(wrong.length, 0, 'every segment root recomputed from its chunks');

    t.ok(attack.grewMb < 200, `control plane RSS grew ${attack.grewMb.toFixed(0)} MB during the flood (was 7.5 GB)`);
    const f = (x: number) => x.toFixed(1);
    t.comment(
      `other tenant GET ms: idle p50 ${f(pct(idle, 50))} p95 ${f(pct(idle, 95))}; ` +
        `during a plain 3.6 MB download (${benign.ms.toFixed(0)} ms) p50 ${f(pct(benign.lat, 50))} p95 ${f(pct(benign.lat, 95))}; ` +
        `during the flood (${attack.ms.toFixed(0)} ms) p50 ${f(pct(attack.lat, 50))} p95 ${f(pct(attack.lat, 95))} ` +
        `(n=${attack.lat.length}); RSS +${benign.grewMb.toFixed(0)} / +${attack.grewMb.toFixed(0)} MB`,
    );
    t.ok(attack.lat.length >= 5, 'the other tenant was served throughout');
    // Normal = what the same bytes cost as a plain download in this run (loaded 2-core machine: 2x + 25 ms slack).
    t.ok(
      pct(attack.lat, 50) <= 2 * pct(benign.lat, 50) + 25,
      `other tenant p50 under the flood within 2x + 25 ms of a plain download's`,
    );
    t.ok(pct(attack.lat, 95) <= 2 * pct(benign.lat, 95) + 100, `p95 within 2x + 100 ms of a plain download's`);
    t.ok(attack.ms <= 3 * benign.ms + 1000, 'the flood costs about what the same bytes cost as a download');
  });
});
