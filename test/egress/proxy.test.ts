// End-to-end through a real proxy instance with real TLS on loopback:
// curl, node and python3 as clients; destination policy; recording.
import t from 'tap';
import { startEgressProxy, type EgressEvent, type EgressRefusal } from '../../egress-proxy/index.js';
import { canonicalize as jcs } from '../../shared/proof/index.js';
import { eventsOf, fakeResolver, makePki, run, sha512, startUpstreams, tempDir } from './fixtures.js';

const pki = makePki(['api.egress.test', 'mcp.egress.test', 'other.egress.test', '127.0.0.1']);
const up = await startUpstreams(pki);
const tmp = tempDir('egress-proxy-test-');
const lookups: string[] = [];
const events: EgressEvent[] = [];
const allEvents: EgressEvent[] = [];
const refusals: EgressRefusal[] = [];
const P = up.ports;

const proxy = await startEgressProxy({
  capsuleId: 'cap_test_proxy',
  socketPath: `${tmp.dir}/proxy.sock`,
  tcp: { host: '127.0.0.1', port: 0 },
  profileRules: [
    { kind: 'domain', value: 'api.egress.test', port: P.https },
    { kind: 'domain', value: 'api.egress.test', port: P.http },
    { kind: 'domain', value: 'profile-only.egress.test', port: P.https },
    { kind: 'domain', value: 'api.egress.test', port: P.rogue },
    { kind: 'domain', value: 'api.egress.test', port: P.refused },
    { kind: 'domain', value: 'api.egress.test', port: P.badTls },
    { kind: 'domain', value: 'api.egress.test', port: P.loris },
    { kind: 'domain', value: 'unlisted-ip.egress.test', port: P.https },
    { kind: 'domain', value: 'meta.egress.test', port: 80 },
    // Loopback upstreams need the address named explicitly (loopback is refused otherwise).
    { kind: 'domain', value: 'api.egress.test', port: P.fatHeaders },
    { kind: 'domain', value: 'api.egress.test', port: P.badStatus },
    ...[P.https, P.http, P.rogue, P.refused, P.badTls, P.loris, P.fatHeaders, P.badStatus].map((port) => ({
      kind: 'ip_v4' as const,
      value: '127.0.0.1',
      port,
    })),
  ],
  declaration: ['api.egress.test', 'decl-only.egress.test', 'unlisted-ip.egress.test', 'meta.egress.test', '127.0.0.1'],
  extraCaPem: pki.caPem,
  resolver: fakeResolver(
    {
      'api.egress.test': '127.0.0.1',
      'profile-only.egress.test': '127.0.0.1',
      'decl-only.egress.test': '127.0.0.1',
      'unlisted-ip.egress.test': '127.0.0.2',
      'meta.egress.test': '169.254.169.254',
    },
    lookups,
  ),
  onEvent: (e) => {
    events.push(e);
    allEvents.push(e);
  },
  onRefusal: (r) => refusals.push(r),
  limits: { headersTimeoutMs: 1500, maxResponseBytes: 8 * 1024 * 1024 },
});
const proxyUrl = `http://127.0.0.1:${proxy.tcpAddress?.port}`;
const caFile = tmp.write('capsule-ca.pem', proxy.caPem);
const curl = (...args: string[]) =>
  run('curl', ['-sS', '--max-time', '20', '--proxy', proxyUrl, '--cacert', caFile, '-w', '\n%{http_code}', ...args]);
const split = (out: string) => {
  const i = out.lastIndexOf('\n');
  return { body: out.slice(0, i), status: Number(out.slice(i + 1)) };
};

t.teardown(async () => {
  await proxy.stop();
  await up.close();
  tmp.remove();
});

t.test('curl: allowed host over HTTPS works and is recorded with correct hashes', async (t) => {
  events.length = 0;
  const payload = JSON.stringify({ q: 'hello' });
  const r = await curl(
    '-X',
    'POST',
    '-H',
    'content-type: application/json',
    '--data-binary',
    payload,
    `https://api.egress.test:${P.https}/json?n=1`,
  );
  t.equal(r.code, 0, r.stderr);
  const { body, status } = split(r.stdout);
  t.equal(status, 200);
  t.equal(JSON.parse(body).echo_sha512, sha512(payload), 'upstream got the exact body');
  const seen = up.seen.at(-1);
  t.equal(seen?.sni, 'api.egress.test', 'upstream SNI is the original hostname');
  t.equal(seen?.host, `api.egress.test:${P.https}`);
  const [ev] = eventsOf(events, 'SealedHttpRequest');
  t.ok(ev);
  if (!ev) return;
  t.equal(ev.method, 'POST');
  t.equal(ev.host, 'api.egress.test');
  t.equal(ev.port, P.https);
  t.equal(ev.status, 200);
  t.equal(ev.request_body_hash, sha512(payload));
  t.equal(ev.request_body_bytes, Buffer.byteLength(payload));
  t.equal(ev.response_body_hash, sha512(body));
  t.equal(ev.outcome, 'completed');
  t.equal(ev.tls?.validation, 'valid');
  t.match(ev.tls?.version ?? '', /^TLSv1\.[23]$/);
  t.match(ev.tls?.peer_certificate_sha256 ?? '', /^sha256:[0-9a-f]{64}$/);
  t.ok(ev.duration_ms >= 0);
  t.notMatch(JSON.stringify(events), /hello|\/json/, 'events carry no body bytes or path');
});

t.test('curl: plain HTTP absolute-URI request to an allowed host is forwarded and recorded', async (t) => {
  events.length = 0;
  const r = await curl(`http://api.egress.test:${P.http}/json?n=2`);
  const { body, status } = split(r.stdout);
  t.equal(status, 200, r.stderr);
  t.equal(JSON.parse(body).n, 2);
  const [ev] = eventsOf(events, 'SealedHttpRequest');
  t.equal(ev?.scheme, 'http');
  t.equal(ev?.tls, null);
  t.equal(ev?.response_body_hash, sha512(body));
  t.equal(ev?.request_body_hash, sha512(''));
});

t.test(
  'a CONNECT tunnel carrying anything but TLS is closed with 400 (no raw protocols through tunnels)',
  async (t) => {
    events.length = 0;
    const r = await curl('--proxytunnel', `http://api.egress.test:${P.http}/json?n=6`);
    t.equal(split(r.stdout).status, 400, r.stderr);
    t.equal(refusals.at(-1)?.reason, 'unsupported');
    t.equal(eventsOf(events, 'SealedHttpRequest').length, 0);
  },
);

t.test('node (fetch, NODE_USE_ENV_PROXY) through the proxy with the capsule CA', async (t) => {
  events.length = 0;
  const script = `const r = await fetch('https://api.egress.test:${P.https}/json?n=3', { method: 'POST', body: 'from-node' });
    console.log(r.status, JSON.parse(await r.text()).echo_sha512);`;
  const r = await run(process.execPath, ['--input-type=module', '-e', script], {
    NODE_USE_ENV_PROXY: '1',
    HTTPS_PROXY: proxyUrl,
    HTTP_PROXY: proxyUrl,
    NODE_EXTRA_CA_CERTS: caFile,
  });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout.trim(), `200 ${sha512('from-node')}`);
  t.equal(eventsOf(events, 'SealedHttpRequest')[0]?.request_body_hash, sha512('from-node'));
});

t.test('python3 (urllib, HTTPS_PROXY) through the proxy with the capsule CA', async (t) => {
  events.length = 0;
  const script = [
    'import ssl, urllib.request, json, os',
    `ctx = ssl.create_default_context(cafile=os.environ["SSL_CERT_FILE"])`,
    `op = urllib.request.build_opener(urllib.request.ProxyHandler(), urllib.request.HTTPSHandler(context=ctx))`,
    `r = op.open(urllib.request.Request("https://api.egress.test:${P.https}/json?n=4", data=b"from-python"))`,
    'print(r.status, json.loads(r.read())["echo_sha512"])',
  ].join('\n');
  const r = await run('python3', ['-c', script], {
    HTTPS_PROXY: proxyUrl,
    https_proxy: proxyUrl,
    SSL_CERT_FILE: caFile,
  });
  t.equal(r.code, 0, r.stderr);
  t.equal(r.stdout.trim(), `200 ${sha512('from-python')}`);
  t.equal(eventsOf(events, 'SealedHttpRequest')[0]?.request_body_hash, sha512('from-python'));
});

t.test('keep-alive: several requests on one tunnel each get their own event', async (t) => {
  events.length = 0;
  const u = `https://api.egress.test:${P.https}/json`;
  const r = await curl(`${u}?n=1`, `${u}?n=2`, `${u}?n=3`);
  t.equal(r.code, 0, r.stderr);
  const evs = eventsOf(events, 'SealedHttpRequest');
  t.equal(evs.length, 3);
  t.equal(new Set(evs.map((e) => e.request_canonical_hash)).size, 3, 'different URLs, different canonical hashes');
});

t.test('host only in the profile is refused (not in egress_declaration), without a DNS lookup', async (t) => {
  lookups.length = 0;
  const r = await curl(`https://profile-only.egress.test:${P.https}/json`);
  t.not(r.code, 0);
  t.match(r.stderr, /403/);
  t.equal(refusals.at(-1)?.reason, 'not_in_declaration');
  t.same(lookups, [], 'unlisted names are never resolved');
});

t.test('host only in the declaration is refused (not in the profile)', async (t) => {
  const r = await curl(`https://decl-only.egress.test:${P.https}/json`);
  t.not(r.code, 0);
  t.match(r.stderr, /403/);
  t.equal(refusals.at(-1)?.reason, 'not_in_profile');
});

t.test('direct IP not in the rules is refused', async (t) => {
  const r = await curl(`https://192.0.2.10:${P.https}/json`);
  t.not(r.code, 0);
  t.match(r.stderr, /403/);
  t.equal(refusals.at(-1)?.reason, 'not_in_profile');
  const r2 = await curl(`http://198.51.100.7:${P.http}/json`);
  t.equal(split(r2.stdout).status, 403, 'plain HTTP to an unlisted IP too');
});

t.test('loopback is refused when no rule names the address (allowed name resolving to 127.0.0.2)', async (t) => {
  const r = await curl(`https://unlisted-ip.egress.test:${P.https}/json`);
  t.not(r.code, 0);
  t.match(r.stderr, /403/);
  t.same(refusals.at(-1)?.reason, 'special_address');
});

t.test('an allowed name resolving to the cloud metadata address is refused', async (t) => {
  const r = await curl('http://meta.egress.test/latest/meta-data/');
  t.equal(split(r.stdout).status, 403);
  t.same(refusals.at(-1)?.reason, 'special_address');
  t.match(refusals.at(-1)?.detail ?? '', /metadata/);
});

t.test('IPv4-mapped IPv6 literal is judged as the IPv4 address', async (t) => {
  const r = await curl(`https://[::ffff:127.0.0.2]:${P.https}/json`);
  t.not(r.code, 0);
  t.equal(refusals.at(-1)?.reason, 'special_address', '::ffff:127.0.0.2 is loopback');
  events.length = 0;
  const ok = await curl(`https://[::ffff:127.0.0.1]:${P.https}/json`);
  t.equal(
    split(ok.stdout).status,
    200,
    `the explicitly named 127.0.0.1 rule applies to its mapped form, connected as 127.0.0.1 (${ok.stderr})`,
  );
});

t.test('resolve once per tunnel: several requests on one CONNECT use the one checked address', async (t) => {
  lookups.length = 0;
  const u = `https://api.egress.test:${P.https}/json`;
  const r = await curl(`${u}?a`, `${u}?b`, `${u}?c`);
  t.equal(r.code, 0);
  t.same(lookups, ['api.egress.test'], 'one lookup for three requests');
});

t.test('CONNECT to a disallowed port is refused', async (t) => {
  const r = await curl(`https://api.egress.test:${P.https + 1 === P.http ? P.https + 2 : P.https + 1}/json`);
  t.not(r.code, 0);
  t.match(r.stderr, /403/);
  t.equal(refusals.at(-1)?.reason, 'not_in_profile');
});

t.test('Host header naming another host inside a tunnel is refused (no domain fronting)', async (t) => {
  events.length = 0;
  const r = await curl('-H', 'Host: other.egress.test', `https://api.egress.test:${P.https}/json`);
  t.equal(split(r.stdout).status, 421);
  t.equal(eventsOf(events, 'SealedHttpRequest').length, 0, 'nothing forwarded, nothing recorded');
});

t.test(
  'hostile upstream: certificate from an untrusted CA -> 502, recorded as TLS failure, nothing sent',
  async (t) => {
    events.length = 0;
    const before = up.seen.length;
    const r = await curl(`https://api.egress.test:${P.rogue}/json`);
    t.equal(split(r.stdout).status, 502);
    t.equal(up.seen.length, before, 'the rogue upstream never saw the request');
    const [ev] = eventsOf(events, 'SealedHttpRequest');
    t.equal(ev?.outcome, 'upstream_tls_failed');
    t.match(ev?.tls?.validation ?? '', /^failed:/);
    t.equal(ev?.status, null);
  },
);

t.test('hostile upstream: TLS handshake failure -> 502', async (t) => {
  const r = await curl(`https://api.egress.test:${P.badTls}/json`);
  t.equal(split(r.stdout).status, 502);
});

t.test('hostile upstream: connection refused -> 502', async (t) => {
  events.length = 0;
  const r = await curl(`https://api.egress.test:${P.refused}/json`);
  t.equal(split(r.stdout).status, 502);
  t.equal(eventsOf(events, 'SealedHttpRequest')[0]?.outcome, 'upstream_unreachable');
});

t.test('hostile upstream: slow loris response headers -> 504 within the bound', async (t) => {
  events.length = 0;
  const t0 = Date.now();
  const r = await curl(`https://api.egress.test:${P.loris}/json`);
  t.equal(split(r.stdout).status, 504);
  t.ok(Date.now() - t0 < 10_000, 'bounded');
  t.equal(eventsOf(events, 'SealedHttpRequest')[0]?.outcome, 'upstream_timeout');
});

t.test('hostile upstream: huge declared response -> 502 before any byte is relayed', async (t) => {
  const r = await curl(`https://api.egress.test:${P.https}/huge`);
  t.equal(split(r.stdout).status, 502);
});

t.test('hostile upstream: huge streamed response is cut at the bound; the client sees an error', async (t) => {
  events.length = 0;
  const r = await run('curl', [
    '-sS',
    '-o',
    '/dev/null',
    '--max-time',
    '30',
    '--proxy',
    proxyUrl,
    '--cacert',
    caFile,
    `https://api.egress.test:${P.https}/huge-chunked`,
  ]);
  t.not(r.code, 0, 'curl reports a truncated transfer');
  const ev = eventsOf(events, 'SealedHttpRequest')[0];
  t.equal(ev?.outcome, 'response_too_large');
  t.ok((ev?.response_body_bytes ?? 0) <= 8 * 1024 * 1024 + 64 * 1024);
});

t.test('hostile upstream: oversized response headers -> 502', async (t) => {
  const r = await curl(`https://api.egress.test:${P.fatHeaders}/json`);
  t.equal(split(r.stdout).status, 502);
});

t.test('hostile upstream: a status below 100 -> 502, recorded without a status, and the proxy lives on', async (t) => {
  events.length = 0;
  const r = await curl(`https://api.egress.test:${P.badStatus}/json`);
  t.equal(split(r.stdout).status, 502);
  const ev = eventsOf(events, 'SealedHttpRequest')[0];
  t.equal(ev?.status, null, 'no HTTP status is claimed');
  t.equal(ev?.outcome, 'upstream_unreachable');
  const next = await curl(`https://api.egress.test:${P.https}/json?n=3`);
  t.equal(split(next.stdout).status, 200);
});

t.test('hostile client: a CONNECT tunnel that never starts TLS is closed after the idle bound', async (t) => {
  const { connect } = await import('node:net');
  const short = await startEgressProxy({
    capsuleId: 'cap_idle',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'api.egress.test', port: P.https },
      { kind: 'ip_v4', value: '127.0.0.1', port: P.https },
    ],
    declaration: ['api.egress.test', '127.0.0.1'],
    resolver: fakeResolver({ 'api.egress.test': '127.0.0.1' }),
    onEvent: () => {},
    limits: { idleTimeoutMs: 500 },
  });
  const t0 = Date.now();
  const closed = await new Promise<string>((resolve) => {
    const s = connect(short.tcpAddress!.port, '127.0.0.1', () =>
      s.write(`CONNECT api.egress.test:${P.https} HTTP/1.1\r\nHost: api.egress.test:${P.https}\r\n\r\n`),
    );
    let got = '';
    s.on('data', (d) => {
      got += d;
    });
    s.on('close', () => resolve(got));
    s.on('error', () => {});
  });
  t.match(closed, /^HTTP\/1\.1 200/);
  t.ok(Date.now() - t0 < 5000, 'closed by the proxy');
  await short.stop();
});

t.test('the proxy stays up after hostile upstreams and serves the next request', async (t) => {
  const r = await curl(`https://api.egress.test:${P.https}/json?n=9`);
  t.equal(split(r.stdout).status, 200);
});

t.test('streamed (chunked) response: Started, per-block Chunk hashes, Completed with the Merkle root', async (t) => {
  events.length = 0;
  const r = await run(
    'curl',
    ['-sS', '--max-time', '20', '--proxy', proxyUrl, '--cacert', caFile, `https://api.egress.test:${P.https}/stream`],
    {},
  );
  t.equal(r.code, 0);
  const { merkleRoot, merkleLeafHash } = await import('../../shared/proof/index.js');
  const bodyBytes = Buffer.concat([Buffer.alloc(70000, 1), Buffer.alloc(10, 2)]);
  const started = eventsOf(events, 'StreamingEgressStarted');
  const chunks = eventsOf(events, 'StreamingEgressChunk');
  const [done] = eventsOf(events, 'StreamingEgressCompleted');
  t.equal(started.length, 1);
  t.equal(started[0]?.framing, 'blocks');
  const blocks = [bodyBytes.subarray(0, 65536), bodyBytes.subarray(65536)];
  const digests = blocks.map((b) => Buffer.from(sha512(b).slice(7), 'hex'));
  // Two blocks: two one-chunk segments, each root the RFC 6962 leaf hash of its block digest.
  t.same(
    chunks.map((c) => [c.first_chunk, c.chunks, c.bytes, c.segment_root]),
    digests.map((d, i) => [i, 1, blocks[i]!.length, `sha512:${Buffer.from(merkleLeafHash(d)).toString('hex')}`]),
  );
  t.equal(done?.merkle_root, `sha512:${Buffer.from(merkleRoot(digests)).toString('hex')}`);
  t.equal(done?.total_bytes, bodyBytes.length);
  const sealed = eventsOf(events, 'SealedHttpRequest')[0];
  t.equal(sealed?.streamed, true);
  t.equal(sealed?.response_body_hash, sha512(bodyBytes));
});

t.test('the Unix socket listener serves the same proxy (what the capsule relay connects to)', async (t) => {
  const { request } = await import('node:http');
  const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
    const req = request(
      {
        socketPath: proxy.socketPath,
        method: 'GET',
        path: `http://api.egress.test:${P.http}/json?n=5`,
        headers: { host: `api.egress.test:${P.http}` },
      },
      (r) => {
        let b = '';
        r.on('data', (c) => {
          b += c;
        });
        r.on('end', () => resolve({ status: r.statusCode ?? 0, body: b }));
      },
    );
    req.on('error', reject);
    req.end();
  });
  t.equal(res.status, 200);
  t.equal(JSON.parse(res.body).n, 5);
});

t.test(
  'every recorded event is trail-ready: a type, a docs/PROOF_FORMAT.md timestamp, JCS-encodable, no seq (the recorder assigns it)',
  async (t) => {
    t.ok(allEvents.length > 20);
    for (const e of allEvents) {
      t.match(e.at, /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/);
      t.doesNotThrow(() => jcs(e));
      t.notOk('seq' in e);
    }
    const types = new Set(allEvents.map((e) => e.type));
    t.same([...types].sort(), [
      'SealedHttpRequest',
      'StreamingEgressChunk',
      'StreamingEgressCompleted',
      'StreamingEgressStarted',
    ]);
  },
);
