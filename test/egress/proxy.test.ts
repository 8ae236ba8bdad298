// End-to-end through a real proxy instance with real TLS on loopback:
// curl, node and python3 as clients; destination policy; recording.
import t from 'tap';
import { startEgressProxy, type EgressEvent, type EgressRefusal } from '../../egress-proxy/index.js';
import { eventsOf, fakeResolver, makePki, run, sha512, startUpstreams, tempDir } from './fixtures.js';

const pki = makePki(['api.egress.test', 'mcp.egress.test', 'other.egress.test', '127.0.0.1']);
const up = await startUpstreams(pki);
const tmp = tempDir('egress-proxy-test-');
const lookups: string[] = [];
const events: EgressEvent[] = [];
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
    // Loopback upstreams need the address named explicitly (loopback is refused otherwise).
    ...[P.https, P.http, P.rogue, P.refused, P.badTls, P.loris].map((port) => ({ kind: 'ip_v4' as const, value: '127.0.0.1', port })),
  ],
  declaration: ['api.egress.test', 'decl-only.egress.test', 'unlisted-ip.egress.test', '127.0.0.1'],
  extraCaPem: pki.caPem,
  resolver: fakeResolver({
    'api.egress.test': '127.0.0.1', 'profile-only.egress.test': '127.0.0.1', 'decl-only.egress.test': '127.0.0.1',
    'unlisted-ip.egress.test': '127.0.0.2',
  }, lookups),
  onEvent: (e) => events.push(e),
  onRefusal: (r) => refusals.push(r),
  limits: { headersTimeoutMs: 1500, maxResponseBytes: 8 * 1024 * 1024 },
});
const proxyUrl = `http://127.0.0.1:${proxy.tcpAddress?.port}`;
const caFile = tmp.write('capsule-ca.pem', proxy.caPem);
const curl = (...args: string[]) => run('curl', ['-sS', '--max-time', '20', '--proxy', proxyUrl, '--cacert', caFile, '-w', '\n%{http_code}', ...args]);
const split = (out: string) => { const i = out.lastIndexOf('\n'); return { body: out.slice(0, i), status: Number(out.slice(i + 1)) }; };

t.teardown(async () => { await proxy.stop(); await up.close(); tmp.remove(); });

t.test('curl: allowed host over HTTPS works and is recorded with correct hashes', async (t) => {
  events.length = 0;
  const payload = JSON.stringify({ q: 'hello' });
  const r = await curl('-X', 'POST', '-H', 'content-type: application/json', '--data-binary', payload, `https://api.egress.test:${P.https}/json?n=1`);
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
