// Sealed egress end to end through the control plane: real runner capsules,
// one real egress proxy per capsule started by the control plane, real TLS to
// local upstream HTTPS servers whose test CA is trusted only through
// CAPSULE_EGRESS_EXTRA_CA, requests made from INSIDE the capsules with curl,
// python3 and node; events recorded in the trail and verified in the proof.
// Test hostnames resolve to 127.0.0.1 through the control plane's egress
// resolver seam; the rules name 127.0.0.1 explicitly. SQLite and PostgreSQL.
import t from 'tap';
import { createHash } from 'node:crypto';
import { gunzipSync } from 'node:zlib';
import { pino } from 'pino';
import { canonicalize, verifyProof } from '../../shared/proof/index.js';
import { combineSegmentRoots } from '../../egress-proxy/index.js';
import { startControlPlane } from '../../control-plane/server.js';
import { Api, DRIVERS, freshDb, testConfig, type T } from '../control-plane/harness.js';
import { startRunner } from '../helpers/runner.js';
import { fakeResolver, makePki, startUpstreams, tempDir } from '../egress/fixtures.js';

const sha = (b: string | Buffer): string => `sha512:${createHash('sha512').update(b).digest('hex')}`;
const NAMES = [
  'api.test',
  'mcp.test',
  'profonly.test',
  'declonly.test',
  'loris.test',
  'badtls.test',
  'huge.test',
  'rogue.test',
];

type Ev = { seq: number; type: string; at: string; [k: string]: any };

t.test('sealed egress wired through the control plane', async (t) => {
  const pki = makePki(NAMES);
  const up = await startUpstreams(pki);
  t.teardown(() => up.close());
  const dir = tempDir('egress-int-');
  t.teardown(dir.remove);
  const caFile = dir.write('test-ca.pem', pki.caPem);
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const P = up.ports;
  const lookups: string[] = [];
  // The resolver seam: test names -> 127.0.0.1; anything else fails like NXDOMAIN.
  const resolver = fakeResolver(Object.fromEntries(NAMES.map((n) => [n, '127.0.0.1'])), lookups);

  for (const driver of DRIVERS) {
    await t.test(driver, async (t) => {
      const db = await freshDb(driver);
      const cp = await startControlPlane(
        testConfig(db.url, {
          CAPSULE_RATE_LIMITS: 'off',
          CAPSULE_EGRESS_EXTRA_CA: caFile,
          CAPSULE_SWEEP_INTERVAL_MS: '200',
        }),
        runner.client,
        {
          logger: pino({ level: 'silent' }),
          egress: { resolver, limits: { headersTimeoutMs: 1500, connectTimeoutMs: 3000 } },
        },
      );
      t.teardown(async () => {
        await cp.close();
        await db.drop();
      });
      const api = new Api(cp.url);
      const team = await api.signup();
      await cp.store.setTierByEmail(team.email, 'business');
      const k = team.key;

      // Profile: every test name on its port, plus 127.0.0.1 on those ports (loopback must be named explicitly).
      const prof = await api.req('POST', '/v1/egress/profiles', {
        key: k,
        json: { name: 'it', description: 'integration' },
      });
      t.equal(prof.status, 201, prof.text);
      const pid = prof.body.id as string;
      const rules: [string, string, number][] = [
        ['domain', 'api.test', P.https],
        ['domain', 'mcp.test', P.https],
        ['domain', 'profonly.test', P.https],
        ['domain', 'loris.test', P.loris],
        ['domain', 'badtls.test', P.badTls],
        ['domain', 'huge.test', P.https],
        ['domain', 'rogue.test', P.rogue],
        ...[P.https, P.loris, P.badTls, P.rogue].map((p) => ['ip_v4', '127.0.0.1', p] as [string, string, number]),
      ];
      for (const [kind, value, port] of rules) {
        const r = await api.req('POST', `/v1/egress/profiles/${pid}/rules`, { key: k, json: { kind, value, port } });
        t.equal(r.status, 201, r.text);
      }
      // Capsulefile: declaration (no profonly.test) and an MCP tool policy.
      const cf = await api.req('POST', '/v1/capsulefiles', {
        key: k,
        json: {
          name: 'egress-it',
          runtime: 'sh',
          entrypoint: 'true',
          egress_declaration: [
            'api.test',
            'mcp.test',
            'declonly.test',
            'loris.test',
            'badtls.test',
            'huge.test',
            'rogue.test',
            '127.0.0.1',
          ],
          mcp_policy: { allowed_tools: ['search', 'delete_all_if_allowed'], prohibited_tools: ['delete_all'] },
        },
      });
      t.equal(cf.status, 201, cf.text);
      t.equal((await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: k })).status, 200);
      const cfId = cf.body.id as string;

      const newCapsule = async (json: Record<string, unknown>): Promise<string> => {
        const c = await api.req('POST', '/v1/capsules', { key: k, json: { ttl: 300, ...json } });
        t.equal(c.status, 201, c.text);
        return c.body.id as string;
      };
      const exec = async (id: string, command: string, input?: string) => {
        const r = await api.req('POST', `/v1/capsules/${id}/exec`, {
          key: k,
          json: { command, timeout: 60, ...(input !== undefined ? { input_data: input } : {}) },
        });
        if (r.status !== 200) throw new Error(`exec ${r.status}: ${r.text}`);
        return r.body as { stdout: string; stderr: string; exit_code: number };
      };
      const destroy = async (id: string) => {
        const d = await api.req('DELETE', `/v1/capsules/${id}`, { key: k });
        t.equal(d.status, 200, d.text.slice(0, 300));
        return d.body as { cdp: { activity: Ev[]; evidence: Record<string, any>[] } };
      };
      const verified = (tt: T, cdp: unknown) => {
        const v = verifyProof(cdp);
        tt.equal(v.valid, true, `AuditProof verified: ${JSON.stringify(v).slice(0, 300)}`);
      };
      const keysDestroyed = (tt: T, cdp: { evidence: Record<string, any>[] }) => {
        const step4 = cdp.evidence[3] as Record<string, any>;
        tt.ok(step4['egress_proxy'], 'step 4 carries the egress proxy key destruction');
        const ep = step4['egress_proxy'];
        tt.same(ep.keys.map((x: { role: string }) => x.role).sort(), ['egress_ca', 'egress_leaf']);
        tt.ok(
          ep.keys.every(
            (x: { readback_all_zero: boolean; der_bytes: number }) => x.readback_all_zero === true && x.der_bytes > 0,
          ),
          'keys overwritten and read back as zeros',
        );
        tt.match(ep.ca_certificate_sha256, /^sha256:[0-9a-f]{64}$/);
        tt.equal(ep.activity_events_not_recorded, 0);
        tt.ok(
          'key_bytes' in step4 || Object.keys(step4).length > 1,
          "the runner's own step 4 evidence is kept beside it",
        );
      };

      await t.test('a capsule without a profile keeps loopback only', async (t) => {
        const id = await newCapsule({ capsulefile_id: cfId });
        const r = await exec(
          id,
          `env | grep -ci _proxy; curl -sS -m 5 https://api.test:${P.https}/json 2>&1 || echo no-network; curl -sS -m 3 -x http://127.0.0.1:3128 https://api.test:${P.https}/json 2>&1 || echo no-relay`,
        );
        t.match(r.stdout, /^0\n/, 'no proxy variables');
        t.match(r.stdout, /no-network/);
        t.match(r.stdout, /no-relay/);
        const d = await destroy(id);
        t.notOk('egress_proxy' in d.cdp.evidence[3]!, 'no egress layer, no egress evidence');
        t.notOk(d.cdp.activity.some((e) => e.type === 'SealedHttpRequest'));
      });

      await t.test(
        'allowed host from curl, python3 and node: works, recorded with correct hashes, verifies in the proof',
        async (t) => {
          const id = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid });
          const before = up.seen.length;
          const curl = await exec(
            id,
            `curl -sS -m 20 -H 'accept: application/json' -H 'content-type: application/json' --data-binary 'hello-curl' https://api.test:${P.https}/json?n=1`,
          );
          t.equal(curl.exit_code, 0, curl.stderr);
          const py = await exec(
            id,
            'python3 /data/input/data',
            [
              'import urllib.request',
              `req = urllib.request.Request("https://api.test:${P.https}/json?n=2", data=b"hello-python", method="POST", headers={"accept": "application/json", "content-type": "application/json"})`,
              'r = urllib.request.urlopen(req, timeout=20)',
              'print(r.status, r.read().decode())',
            ].join('\n'),
          );
          t.equal(py.exit_code, 0, py.stderr);
          // Node 20 in the image has no env-proxy support in fetch: CONNECT through the relay by hand, TLS trusted via NODE_EXTRA_CA_CERTS.
          const node = await exec(
            id,
            'node /data/input/data',
            `
const http = require('http'), tls = require('tls');
const c = http.request({ host: '127.0.0.1', port: 3128, method: 'CONNECT', path: 'api.test:${P.https}' });
c.on('connect', (res, sock) => {
  if (res.statusCode !== 200) { console.log('connect', res.statusCode); process.exit(3); }
  const s = tls.connect({ socket: sock, servername: 'api.test' }, () => {
    const r = http.request({ host: 'api.test', port: ${P.https}, path: '/json?n=3', method: 'POST', createConnection: () => s,
      headers: { accept: 'application/json', 'content-type': 'application/json', 'content-length': 10 } }, (resp) => {
      let b = ''; resp.on('data', (d) => b += d); resp.on('end', () => { console.log(resp.statusCode, b); s.end(); });
    });
    r.end('hello-node');
  });
  s.on('error', (e) => { console.log('tls', e.code || e.message); process.exit(4); });
});
c.on('error', (e) => { console.log('proxy', e.message); process.exit(5); });
c.end();
`,
          );
          t.equal(node.exit_code, 0, `${node.stdout} ${node.stderr}`);
          const expect = (body: string, n: number) => JSON.stringify({ ok: true, echo_sha512: sha(body), n });
          t.equal(curl.stdout, expect('hello-curl', 1), 'curl got the upstream answer');
          t.equal(py.stdout.trim(), `200 ${expect('hello-python', 2)}`);
          t.equal(node.stdout.trim(), `200 ${expect('hello-node', 3)}`);
          t.equal(up.seen.length - before, 3, 'three requests reached the upstream');
          t.ok(
            up.seen.slice(before).every((s) => s.sni === 'api.test'),
            'upstream TLS carried the hostname as SNI',
          );
          t.ok(lookups.includes('api.test'), "the control plane's resolver seam was used");

          const d = await destroy(id);
          verified(t, d.cdp);
          keysDestroyed(t, d.cdp);
          const act = d.cdp.activity;
          t.equal(act[act.length - 1]?.type, 'DestructionInitiated', 'nothing follows DestructionInitiated');
          t.match(act[0], {
            type: 'CapsuleStarted',
            egress_profile_id: pid,
            egress_rules_hash: /^sha512:[0-9a-f]{128}$/,
          });
          const sealed = act.filter((e) => e.type === 'SealedHttpRequest');
          t.equal(sealed.length, 3);
          // Each sealed request is a billable event: one usage item, written with its trail event.
          const usage = await api.req('GET', '/v1/usage/items?limit=100', { key: k });
          const egressItems = usage.body.items.filter((i: any) => i.capsule_id === id && i.kind === 'egress_request');
          t.same(
            egressItems.map((i: any) => [i.created_at, i.quantity, i.unit, i.mode]).sort(),
            sealed.map((e) => [e.at, 1, 'request', 'live']).sort(),
            'one egress_request usage item per SealedHttpRequest',
          );
          const cases: [string, number][] = [
            ['hello-curl', 1],
            ['hello-python', 2],
            ['hello-node', 3],
          ];
          for (const [i, [body, n]] of cases.entries()) {
            const e = sealed[i]!;
            t.match(e, {
              method: 'POST',
              scheme: 'https',
              host: 'api.test',
              port: P.https,
              status: 200,
              outcome: 'completed',
            });
            t.equal(e.request_body_hash, sha(body), `${body}: request body hash`);
            t.equal(e.response_body_hash, sha(expect(body, n)), `${body}: response body hash`);
            t.equal(e.response_body_bytes, Buffer.byteLength(expect(body, n)));
            const canonical = {
              v: 1,
              method: 'POST',
              url: `https://api.test:${P.https}/json?n=${n}`,
              headers: { accept: 'application/json', 'content-type': 'application/json' },
              body_sha512: sha(body),
            };
            t.equal(
              e.request_canonical_hash,
              sha(canonicalize(canonical)),
              `${body}: request canonical hash (JCS, docs/EGRESS.md)`,
            );
            t.match(e.tls, {
              version: /^TLSv1\.[23]$/,
              validation: 'valid',
              peer_certificate_sha256: /^sha256:[0-9a-f]{64}$/,
            });
            t.notMatch(JSON.stringify(e), /hello-|\/json/, 'no body bytes or path in the event');
          }
          // Each exec's egress events are in the trail before its completion event.
          const seqOf = (type: string, nth: number) => act.filter((e) => e.type === type)[nth]!.seq;
          for (let i = 0; i < 3; i++)
            t.ok(
              sealed[i]!.seq > seqOf('ExecutionStarted', i) && sealed[i]!.seq < seqOf('ExecutionCompleted', i),
              `request ${i + 1} inside exec ${i + 1}`,
            );
        },
      );

      await t.test(
        'refused from inside: profile-only host, declaration-only host, IP bypass, DNS, UDP, disallowed CONNECT port',
        async (t) => {
          const id = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid });
          const before = up.seen.length;
          const lookupsBefore = lookups.length;
          const r = await exec(
            id,
            [
              `echo "profonly $(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://profonly.test:${P.https}/json)"`,
              `echo "declonly $(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://declonly.test:${P.https}/json)"`,
              `echo "badport $(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://api.test:${P.http}/json)"`,
              `echo "otherip $(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://127.0.0.2:${P.https}/json)"`,
              `echo "outsideip $(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://10.20.30.40:443/)"`,
              `curl -s -m 5 --noproxy '*' https://127.0.0.1:${P.https}/json >/dev/null 2>&1 && echo direct-ok || echo direct-failed`,
              `curl -s -m 5 --noproxy '*' https://api.test:${P.https}/json >/dev/null 2>&1 && echo direct-name-ok || echo direct-name-failed`,
              'getent hosts api.test >/dev/null 2>&1 && echo dns-ok || echo dns-failed',
              'python3 /data/input/data',
            ].join('; '),
            [
              'import socket',
              'try:',
              '    socket.getaddrinfo("example.com", 443); print("py-dns-ok")',
              'except OSError as e: print("py-dns-failed")',
              'try:',
              '    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x" * 32, ("10.20.30.40", 53)); print("udp-sent")',
              'except OSError as e: print("udp-failed", e.errno)',
              'try:',
              '    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("8.8.8.8", 53)); print("udp-sent")',
              'except OSError as e: print("udp-failed", e.errno)',
              'try:',
              `    socket.create_connection(("127.0.0.1", ${P.https}), timeout=3); print("tcp-direct-ok")`,
              'except OSError as e: print("tcp-direct-failed")',
            ].join('\n'),
          );
          t.match(r.stdout, /^profonly 403$/m, 'a host only in the profile is refused');
          t.match(r.stdout, /^declonly 403$/m, 'a host only in the declaration is refused');
          t.match(r.stdout, /^badport 403$/m, 'CONNECT to a disallowed port is refused');
          t.match(r.stdout, /^otherip 403$/m, 'an unnamed loopback IP through the proxy is refused');
          t.match(r.stdout, /^outsideip 403$/m, 'an IP literal in no rule is refused');
          t.match(r.stdout, /direct-failed/, 'direct IP bypass fails');
          t.match(r.stdout, /direct-name-failed/);
          t.match(r.stdout, /dns-failed/, 'no DNS inside');
          t.match(r.stdout, /py-dns-failed/);
          t.notMatch(r.stdout, /udp-sent/, 'no UDP path out');
          t.match(r.stdout, /tcp-direct-failed/);
          t.equal(up.seen.length, before, 'nothing reached the upstream');
          t.notOk(
            lookups.slice(lookupsBefore).some((n) => n === 'profonly.test' || n === 'declonly.test'),
            'refused names were never resolved',
          );
          const d = await destroy(id);
          verified(t, d.cdp);
          t.notOk(
            d.cdp.activity.some((e) => e.type === 'SealedHttpRequest'),
            'refusals are not activity events',
          );
        },
      );

      await t.test('MCP tools: allowed, prohibited, outside the whitelist, and each fail-open case', async (t) => {
        const id = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid });
        const before = up.seen.length;
        const script = [
          'import gzip, json, sys, urllib.request',
          `BASE = "https://mcp.test:${P.https}"`,
          'def post(path, body, headers={}):',
          '    h = {"content-type": "application/json", "accept": "application/json, text/event-stream"}; h.update(headers)',
          '    r = urllib.request.urlopen(urllib.request.Request(BASE + path, data=body, method="POST", headers=h), timeout=20)',
          '    return {"status": r.status, "denied": r.headers.get("x-capsule-egress-error"), "body": r.read().decode("utf-8", "replace")}',
          'def call(name, id, args):',
          '    return json.dumps({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": name, "arguments": args}}).encode()',
          'out = {}',
          'out["allowed"] = post("/mcp", call("search", 1, {"q": "capsule", "k": 2}))',
          'out["allowed_sse"] = post("/mcp-sse", call("search", 2, {"q": "sse"}), {"mcp-session-id": "sess-1"})',
          'out["prohibited"] = post("/mcp", call("delete_all", 3, {}))',
          'out["outside"] = post("/mcp", call("rm_rf", 4, {}))',
          'out["compressed"] = post("/mcp", gzip.compress(call("delete_all", 5, {})), {"content-encoding": "gzip"})',
          'out["batch"] = post("/mcp", b"[" + call("delete_all", 6, {}) + b"]")',
          'out["malformed"] = post("/mcp", json.dumps({"id": 7, "method": "tools/call", "params": {"name": "delete_all"}}).encode())',
          'print(json.dumps(out))',
        ].join('\n');
        const r = await exec(id, 'python3 /data/input/data', script);
        t.equal(r.exit_code, 0, r.stderr);
        const out = JSON.parse(r.stdout) as Record<string, { status: number; denied: string | null; body: string }>;
        const mcpSeen = up.seen.slice(before);

        await t.test('allowed tool is forwarded and answered', async (t) => {
          t.equal(out.allowed!.status, 200);
          t.equal(out.allowed!.denied, null);
          t.match(JSON.parse(out.allowed!.body), {
            id: 1,
            result: { content: [{ text: 'ran search with {"q":"capsule","k":2}' }] },
          });
          t.match(out.allowed_sse!.body, /ran search with/);
        });
        await t.test('prohibited tool is rejected before forwarding with a readable JSON-RPC error', async (t) => {
          t.equal(out.prohibited!.status, 200);
          t.equal(out.prohibited!.denied, 'mcp_tool_denied');
          t.match(JSON.parse(out.prohibited!.body), {
            jsonrpc: '2.0',
            id: 3,
            error: { code: -32001, data: { reason: 'mcp_policy_denied', tool: 'delete_all' } },
          });
          t.notOk(
            mcpSeen.some((s) => s.body.toString().includes('"id":3')),
            'the upstream never saw it',
          );
        });
        await t.test('a tool outside allowed_tools is rejected', async (t) => {
          t.equal(out.outside!.denied, 'mcp_tool_denied');
          t.match(JSON.parse(out.outside!.body), { id: 4, error: { code: -32001, data: { tool: 'rm_rf' } } });
          t.notOk(mcpSeen.some((s) => s.body.toString().includes('rm_rf')));
        });
        await t.test(
          'fail-open: compressed body (Content-Encoding: gzip) is forwarded without a tool check',
          async (t) => {
            t.equal(out.compressed!.status, 200);
            t.equal(out.compressed!.denied, null);
            const got = mcpSeen.find((s) => s.body[0] === 0x1f && s.body[1] === 0x8b);
            t.ok(got, 'the upstream received the gzip body');
            t.match(
              JSON.parse(gunzipSync(got!.body).toString()),
              { id: 5, params: { name: 'delete_all' } },
              'it was the prohibited call, unchecked',
            );
          },
        );
        await t.test('fail-open: JSON-RPC batch array is forwarded without a tool check', async (t) => {
          t.equal(out.batch!.denied, null);
          t.match(JSON.parse(out.batch!.body), [{ id: 6, result: { content: [{ text: 'ran delete_all with {}' }] } }]);
        });
        await t.test(
          'fail-open: malformed envelope (no "jsonrpc":"2.0") is forwarded without a tool check',
          async (t) => {
            t.equal(out.malformed!.denied, null);
            t.match(JSON.parse(out.malformed!.body), {
              id: 7,
              result: { content: [{ text: 'ran delete_all with {}' }] },
            });
          },
        );

        const d = await destroy(id);
        verified(t, d.cdp);
        keysDestroyed(t, d.cdp);
        const act = d.cdp.activity;
        await t.test(
          'recorded: McpToolInvoked for allowed calls only, streams with a recomputable Merkle root',
          async (t) => {
            const mcp = act.filter((e) => e.type === 'McpToolInvoked');
            t.same(
              mcp.map((e) => e.tool_name),
              ['search', 'search'],
              'denied and fail-open calls produce no McpToolInvoked',
            );
            const args = { q: 'capsule', k: 2 };
            t.equal(mcp[0]!.tool_args_hash, sha(canonicalize(args)));
            t.equal(
              mcp[0]!.tool_result_hash,
              sha(
                canonicalize({
                  content: [{ type: 'text', text: `ran search with ${JSON.stringify(args)}` }],
                  isError: false,
                }),
              ),
            );
            t.match(mcp[0], { outcome: 'success', client_session_id: null });
            t.match(mcp[1], { outcome: 'success', client_session_id: 'sess-1' });
            t.equal(
              mcp[1]!.tool_result_hash,
              sha(canonicalize({ content: [{ type: 'text', text: 'ran search with {"q":"sse"}' }], isError: false })),
            );
            // 2 allowed + 3 fail-open forwarded = 5 SealedHttpRequest; the 2 denied are not recorded.
            t.equal(act.filter((e) => e.type === 'SealedHttpRequest').length, 5);
            const started = act.find((e) => e.type === 'StreamingEgressStarted');
            t.match(started, { framing: 'sse', host: 'mcp.test' });
            const chunks = act.filter((e) => e.type === 'StreamingEgressChunk' && e.exchange === started!.exchange);
            const done = act.find((e) => e.type === 'StreamingEgressCompleted' && e.exchange === started!.exchange);
            t.equal(done!.segments, chunks.length);
            t.ok(done!.chunks >= 1, 'small SSE events share a chunk');
            const root = combineSegmentRoots(
              chunks.map((c) => ({
                firstChunk: c.first_chunk,
                chunks: c.chunks,
                root: Buffer.from(String(c.segment_root).slice(7), 'hex'),
              })),
            );
            t.equal(
              done!.merkle_root,
              `sha512:${root.toString('hex')}`,
              'Merkle root recomputed from the segment events',
            );
            t.notMatch(
              JSON.stringify(act),
              /delete_all|rm_rf|capsule"/,
              'no tool names of denied calls, no arguments in the trail',
            );
          },
        );
      });

      await t.test(
        'hostile upstreams: slow loris, huge response, TLS handshake failure, untrusted certificate; the next capsule is served',
        async (t) => {
          const id = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid });
          const code = (url: string) => `echo "$(curl -s -o /dev/null -m 30 -w '%{http_code}' ${url}) $?"`;
          const r = await exec(
            id,
            [
              `echo "loris $(${code(`https://loris.test:${P.loris}/json`)})"`,
              `echo "huge $(${code(`https://huge.test:${P.https}/huge`)})"`,
              `echo "badtls $(${code(`https://badtls.test:${P.badTls}/json`)})"`,
              `echo "rogue $(${code(`https://rogue.test:${P.rogue}/json`)})"`,
              `curl -sS -m 20 https://api.test:${P.https}/json?n=9`,
            ].join('; '),
          );
          t.match(r.stdout, /^loris 504 0$/m, 'slow loris: 504 after the headers bound');
          t.match(r.stdout, /^huge 502 0$/m, 'declared 4 GiB: 502 before any byte');
          t.match(r.stdout, /^badtls 502 0$/m, 'TLS handshake failure: 502');
          t.match(r.stdout, /^rogue 502 0$/m, 'untrusted upstream certificate: 502');
          t.match(r.stdout, /"n":9/, 'the same proxy still serves');
          const d = await destroy(id);
          verified(t, d.cdp);
          const sealed = d.cdp.activity.filter((e) => e.type === 'SealedHttpRequest');
          t.same(
            sealed.map((e) => e.outcome),
            ['upstream_timeout', 'response_too_large', 'upstream_unreachable', 'upstream_tls_failed', 'completed'],
            'garbage in place of a ServerHello reads as unreachable; an untrusted certificate as a TLS failure',
          );
          t.equal(sealed[2]!.status, null);
          t.match(sealed[3]!.tls, { validation: /^failed:/ });
          const next = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid });
          const n = await exec(next, `curl -sS -m 20 https://api.test:${P.https}/json?n=10`);
          t.match(n.stdout, /"n":10/, 'the next capsule is served');
          verified(t, (await destroy(next)).cdp);
        },
      );

      await t.test('no Capsulefile (no declaration): the AND allows nothing', async (t) => {
        const id = await newCapsule({ egress_profile_id: pid });
        const r = await exec(
          id,
          `env | grep -c '^HTTPS_PROXY='; echo "$(curl -s -o /dev/null -m 10 -w '%{http_connect}' https://api.test:${P.https}/json)"`,
        );
        t.match(r.stdout, /^1\n403\n?$/, 'a sealed layer exists and refuses (not in the declaration)');
        const d = await destroy(id);
        keysDestroyed(t, d.cdp);
      });

      await t.test('TTL expiry stops the proxy and puts its key destruction into step 4', async (t) => {
        const id = await newCapsule({ capsulefile_id: cfId, egress_profile_id: pid, ttl: 2 });
        const r = await exec(id, `curl -sS -m 10 https://api.test:${P.https}/json?n=11`);
        t.match(r.stdout, /"n":11/);
        let status = '';
        for (let i = 0; i < 100 && status !== 'expired'; i++) {
          await new Promise((res) => setTimeout(res, 100));
          status = (await api.req('GET', `/v1/capsules/${id}`, { key: k })).body.status;
        }
        t.equal(status, 'expired');
        const cdp = (await api.req('GET', `/v1/capsules/${id}/cdp`, { key: k })).body;
        verified(t, cdp);
        keysDestroyed(t, cdp);
        t.ok(cdp.activity.some((e: Ev) => e.type === 'SealedHttpRequest' && e.status === 200));
      });

      await t.test('capsule create: bad egress input is refused with nothing left behind', async (t) => {
        const me0 = (await api.req('GET', '/v1/customers/me', { key: k })).body.usage.capsules_used_this_month;
        const e = await api.req('POST', '/v1/capsules', { key: k, json: { egress_profile_id: 'egp_doesnotexist' } });
        t.equal(e.status, 404);
        t.match(e.body.error.message, /^egress_profile_id: /);
        t.equal(
          (await api.req('GET', '/v1/customers/me', { key: k })).body.usage.capsules_used_this_month,
          me0,
          'no capsule counted',
        );
      });
    });
  }
});
