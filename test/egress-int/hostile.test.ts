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
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

// A full collection on demand, to measure live memory rather than garbage.
setFlagsFromString('--expose-gc');
const collectGarbage = runInNewContext('gc') as () => void;

type Ev = { seq: number; type: string; at: string; [k: string]: any };

const SSE_EVENTS = 400_000;
const MiB = 1024 * 1024;
/** The flood body: 400,000 events "data: D\n\n" (9 bytes each), 3.6 MB. */
const floodBytes = (): Buffer => floodBatch(0, SSE_EVENTS);

/**
 * Run inside a capsule: N concurrent slow uploads of a "{" body (a tools/call padded to SIZE bytes)
 * through the relay, 64 KiB every 100 ms each; an upload stops sending as soon as the proxy answers.
 * Prints one JSON line per upload: [status, retry-after, x-capsule-egress-error, body].
 */
const SLOW_UPLOADS = `
import json, socket, ssl, sys, threading, time
host, port, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
ctx = ssl.create_default_context()
out = [None] * n
def parse(buf):
    head, _, body = buf.partition(b'\\r\\n\\r\\n')
    lines = head.decode('latin-1').split('\\r\\n')
    h = {k.strip().lower(): v.strip() for k, _, v in (l.partition(':') for l in lines[1:])}
    return int(lines[0].split()[1]), h, body
def up(i):
    resp = b''
    stage = 'connect'
    try:
        raw = socket.create_connection(('127.0.0.1', 3128), timeout=90)
        raw.sendall(('CONNECT %s:%d HTTP/1.1\\r\\nHost: %s:%d\\r\\n\\r\\n' % (host, port, host, port)).encode())
        got = b''
        while b'\\r\\n\\r\\n' not in got:
            got += raw.recv(4096)
        stage = 'tls'
        s = ctx.wrap_socket(raw, server_hostname=host)
        stage = 'send'
        head = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"search","arguments":{"pad":"' % i
        tail = b'"}}}'
        s.sendall(('POST /upload HTTP/1.1\\r\\nHost: %s:%d\\r\\ncontent-type: application/json\\r\\ncontent-length: %d\\r\\n\\r\\n' % (host, port, size)).encode() + head)
        left = size - len(head) - len(tail)
        resp = b''
        while left > 0:
            # Stop sending as soon as the proxy has answered (a refusal).
            s.setblocking(False)
            try:
                resp += s.recv(65536)
            except (ssl.SSLWantReadError, BlockingIOError):
                pass
            s.setblocking(True)
            s.settimeout(90)
            if b'\\r\\n\\r\\n' in resp:
                break
            k = min(65536, left)
            s.sendall(b'a' * k)
            left -= k
            time.sleep(0.1)
        stage = 'read'
        if left == 0:
            s.sendall(tail)
        while True:
            if b'\\r\\n\\r\\n' in resp:
                status, h, body = parse(resp)
                if len(body) >= int(h.get('content-length', '0')):
                    break
            d = s.recv(65536)
            if not d:
                break
            resp += d
        status, h, body = parse(resp)
        out[i] = [status, h.get('retry-after'), h.get('x-capsule-egress-error'), body.decode()[:200]]
    except Exception as e:
        out[i] = ['error', None, None, repr(e) + ' at ' + stage + ' after ' + repr(resp[:80])]
ts = [threading.Thread(target=up, args=(i,)) for i in range(n)]
for x in ts: x.start()
for x in ts: x.join()
for o in out: print(json.dumps(o))
`;

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
    testConfig(db.url, {
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_EGRESS_EXTRA_CA: caFile,
      // Budgets of the typed config: 16 MiB per capsule, 24 MiB for the process (bodies up to 4 MiB inspected).
      CAPSULE_EGRESS_INSPECT_BYTES_PER_CAPSULE: String(16 * MiB),
      CAPSULE_EGRESS_INSPECT_BYTES_PER_PROCESS: String(24 * MiB),
    }),
    runner.client,
    {
      logger: pino({ level: 'silent' }),
      egress: {
        resolver: fakeResolver({ 'flood.test': '127.0.0.1', 'api.test': '127.0.0.1' }),
        limits: { maxInspectBytes: 4 * MiB },
      },
    },
  );
  t.teardown(async () => {
    await cp.close();
    await db.drop();
  });
  const api = new Api(cp.url);

  // A Team account with a profile naming the upstream and a Capsulefile declaring it (optionally with a tool policy).
  const egressTenant = async (mcpPolicy?: Record<string, unknown>) => {
    const acct = await api.signup();
    await cp.store.setTierByEmail(acct.email, 'business');
    const prof = await api.req('POST', '/v1/egress/profiles', { key: acct.key, json: { name: 'up' } });
    t.equal(prof.status, 201, prof.text);
    for (const [kind, value] of [
      ['domain', 'flood.test'],
      ['domain', 'api.test'],
      ['ip_v4', '127.0.0.1'],
    ] as const) {
      const r = await api.req('POST', `/v1/egress/profiles/${prof.body.id}/rules`, {
        key: acct.key,
        json: { kind, value, port },
      });
      t.equal(r.status, 201, r.text);
    }
    const cf = await api.req('POST', '/v1/capsulefiles', {
      key: acct.key,
      json: {
        name: 'up',
        runtime: 'sh',
        entrypoint: 'true',
        egress_declaration: ['flood.test', 'api.test', '127.0.0.1'],
        ...(mcpPolicy ? { mcp_policy: mcpPolicy } : {}),
      },
    });
    t.equal(cf.status, 201, cf.text);
    t.equal((await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: acct.key })).status, 200);
    const capsule = async () => {
      const c = await api.req('POST', '/v1/capsules', {
        key: acct.key,
        json: { ttl: 600, capsulefile_id: cf.body.id, egress_profile_id: prof.body.id },
      });
      t.equal(c.status, 201, c.text);
      return c.body.id as string;
    };
    return { key: acct.key, capsule };
  };
  const bad = await egressTenant();
  const exec = async (key: string, id: string, command: string, timeout = 120, input?: string) => {
    const r = await api.req('POST', `/v1/capsules/${id}/exec`, {
      key,
      json: { command, timeout, ...(input !== undefined ? { input_data: input } : {}) },
    });
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
    const id = await bad.capsule();
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

  await t.test('64 slow uploads from one capsule against the inspection budgets', async (t) => {
    // Attacker and victim both have a tool policy, so their "{" bodies are held for inspection.
    const policy = { allowed_tools: ['search'] };
    const attacker = await egressTenant(policy);
    const victim = await egressTenant(policy);
    const aId = await attacker.capsule();
    const vId = await victim.capsule();
    const call = (size: number, n = 1) => `python3 /data/input/data api.test ${port} ${n} ${size}`;
    const parse = (stdout: string) =>
      stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as [number | string, string | null, string | null, string]);
    // The victim's tools/call (64 KiB body, held for inspection) idle, then under attack.
    const victimCall = async () => {
      const t0 = performance.now();
      const r = await exec(victim.key, vId, call(64 * 1024), 60, SLOW_UPLOADS);
      if (r.stdout.trim() === '') throw new Error(`uploads printed nothing: ${r.stderr.slice(0, 800)}`);
      const [res] = parse(r.stdout);
      return { ms: performance.now() - t0, status: res?.[0] };
    };
    const idle: number[] = [];
    for (let i = 0; i < 3; i++) {
      const v = await victimCall();
      t.equal(v.status, 200);
      idle.push(v.ms);
    }
    // Memory the control plane holds: live JS heap plus Buffers after a collection
    // (RSS also counts freed pages not yet returned; without the collection,
    // garbage from the drained, refused bodies would count as held).
    const held = () => {
      collectGarbage();
      const m = process.memoryUsage();
      return m.heapUsed + m.arrayBuffers;
    };
    const rss0 = process.memoryUsage().rss;
    const held0 = held();
    let peak = rss0;
    let peakHeld = held0;
    let ticks = 0;
    const sampler = setInterval(() => {
      peak = Math.max(peak, process.memoryUsage().rss);
      if (++ticks % 10 === 0) peakHeld = Math.max(peakHeld, held());
    }, 20);
    let attacking = true;
    const during: { ms: number; status: unknown }[] = [];
    const victimLoop = (async () => {
      while (attacking) during.push(await victimCall());
    })();
    // 64 uploads of 4 MiB - 1 KiB (just under the inspection bound): 256 MB if each were buffered.
    const flood = await exec(attacker.key, aId, call(4 * MiB - 1024, 64), 120, SLOW_UPLOADS);
    attacking = false;
    await victimLoop;
    clearInterval(sampler);
    const results = parse(flood.stdout);
    t.equal(results.length, 64, flood.stderr.slice(0, 500));
    const ok = results.filter((r) => r[0] === 200);
    const refused = results.filter((r) => r[0] === 429);
    t.equal(
      ok.length + refused.length,
      64,
      `every upload answered 200 or 429: ${JSON.stringify(results.filter((r) => r[0] !== 200 && r[0] !== 429)).slice(0, 300)}`,
    );
    t.ok(ok.length >= 1 && ok.length <= 16, `${ok.length} forwarded whole (within the 16 MiB capsule budget)`);
    t.ok(refused.length >= 48, `${refused.length} refused with 429`);
    t.ok(
      refused.every((r) => r[1] === '2' && r[2] === 'inspection_budget_exhausted'),
      '429 with Retry-After and the egress error header',
    );
    t.ok(
      ok.every((r) => JSON.parse(r[3]).bytes === 4 * MiB - 1024),
      'forwarded bodies arrived whole upstream',
    );
    const grewMb = (peak - rss0) / MiB;
    const heldMb = (peakHeld - held0) / MiB;
    t.ok(heldMb < 100, `control plane heap + buffers grew ${heldMb.toFixed(0)} MB (64 bodies of 4 MiB are 256 MB)`);
    t.ok(grewMb < 200, `control plane RSS grew ${grewMb.toFixed(0)} MB`);
    t.ok(during.length >= 1, 'the other capsule made tool calls during the attack');
    t.ok(
      during.every((d) => d.status === 200),
      `the other capsule's inspected calls all succeeded: ${JSON.stringify(during.map((d) => d.status))}`,
    );
    t.comment(
      `slow uploads: ${ok.length} forwarded, ${refused.length} refused; RSS +${grewMb.toFixed(0)} MB; ` +
        `other capsule's tools/call exec ms idle ${idle.map((x) => x.toFixed(0)).join('/')}, ` +
        `under attack ${during.map((d) => d.ms.toFixed(0)).join('/')}`,
    );
    // Each call is an exec starting python in a capsule (about 0.5 s idle), on the same 2-core machine as the
    // attacker's 64 TLS uploads and parallel work: the median is compared, with slack for that load.
    t.ok(
      pct(
        during.map((d) => d.ms),
        50,
      ) <=
        3 * pct(idle, 50) + 500,
      "the other capsule's median call within 3x its idle median + 500 ms",
    );
    t.ok(
      during.every((d) => d.ms < 10_000),
      'no call of the other capsule stalled',
    );
    // A body over the inspection bound is refused outright (413).
    const big = parse((await exec(attacker.key, aId, call(4 * MiB + 1024), 60, SLOW_UPLOADS)).stdout);
    t.match(big[0], [413, null, 'body_too_large_for_inspection']);
    // The budget is free again once the uploads are over.
    const after = parse((await exec(attacker.key, aId, call(64 * 1024), 60, SLOW_UPLOADS)).stdout);
    t.equal(after[0]?.[0], 200, 'budget released');
  });
});
