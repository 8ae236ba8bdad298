// Independent per-capsule instances, the per-capsule CA, and stop(): listeners
// closed, keys overwritten, evidence for destruction chain step 4.
import { X509Certificate } from 'node:crypto';
import { connect } from 'node:net';
import t from 'tap';
import { startEgressProxy, type EgressEvent } from '../../egress-proxy/index.js';
import { fakeResolver, makePki, run, startUpstreams, tempDir } from './fixtures.js';

const pki = makePki(['a.egress.test', 'b.egress.test']);
const up = await startUpstreams(pki);
const tmp = tempDir('egress-life-test-');
t.teardown(async () => {
  await up.close();
  tmp.remove();
});

async function capsule(id: string, name: string, events: EgressEvent[]) {
  const proxy = await startEgressProxy({
    capsuleId: id,
    socketPath: `${tmp.dir}/${id}.sock`,
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: name, port: up.ports.https },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.https },
    ],
    declaration: [name, '127.0.0.1'],
    extraCaPem: pki.caPem,
    resolver: fakeResolver({ 'a.egress.test': '127.0.0.1', 'b.egress.test': '127.0.0.1' }),
    onEvent: (e) => events.push(e),
  });
  const ca = tmp.write(`${id}.pem`, proxy.caPem);
  const get = async (host: string, caFile = ca) => {
    const r = await run('curl', [
      '-sS',
      '-o',
      '/dev/null',
      '-w',
      '%{http_code}',
      '--max-time',
      '10',
      '--proxy',
      `http://127.0.0.1:${proxy.tcpAddress?.port}`,
      '--cacert',
      caFile,
      `https://${host}:${up.ports.https}/json`,
    ]);
    return r.stdout;
  };
  return { proxy, get, ca };
}

t.test('two capsules: independent CAs, rules and events; stopping one leaves the other serving', async (t) => {
  const ea: EgressEvent[] = [];
  const eb: EgressEvent[] = [];
  const [a, b] = await Promise.all([
    capsule('cap_life_a', 'a.egress.test', ea),
    capsule('cap_life_b', 'b.egress.test', eb),
  ]);
  t.not(a.proxy.caPem, b.proxy.caPem);
  t.equal(await a.get('a.egress.test'), '200');
  t.equal(await b.get('b.egress.test'), '200');
  t.not(await a.get('b.egress.test'), '200', "a's rules do not allow b's host");
  t.not(await b.get('b.egress.test', a.ca), '200', "b's leaf does not chain to a's CA");
  t.equal(ea.filter((e) => e.type === 'SealedHttpRequest').length, 1);
  t.equal(eb.filter((e) => e.type === 'SealedHttpRequest').length, 1);

  const evidence = await a.proxy.stop();
  t.equal(evidence.keys.length, 2);
  for (const k of evidence.keys) {
    t.ok(k.der_bytes >= 138, `${k.role} key had DER bytes`);
    t.equal(k.readback_all_zero, true, `${k.role} key overwritten with zeros and read back`);
  }
  t.equal(evidence.leaf_certificates_issued, 1);
  const fp = new X509Certificate(a.proxy.caPem).fingerprint256.replace(/:/g, '').toLowerCase();
  t.equal(evidence.ca_certificate_sha256, `sha256:${fp}`);
  t.equal(evidence.openssl_copies, 'released_to_garbage_collector_not_measured', 'states what was not measured');
  t.equal(await a.proxy.stop(), evidence, 'idempotent');

  const refused = await new Promise<boolean>((resolve) => {
    const s = connect(a.proxy.tcpAddress!.port, '127.0.0.1');
    s.on('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.on('error', () => resolve(true));
  });
  t.ok(refused, 'listener closed');
  t.equal(await b.get('b.egress.test'), '200', 'the other capsule is unaffected');
  await b.proxy.stop();
});

t.test('the per-capsule CA: a constrained CA, leaves minted per host and cached', async (t) => {
  const ev: EgressEvent[] = [];
  const c = await capsule('cap_life_c', 'a.egress.test', ev);
  const ca = new X509Certificate(c.proxy.caPem);
  t.ok(ca.ca, 'basicConstraints CA');
  t.match(ca.subject, /cap_life_c/);
  t.equal(ca.publicKey.asymmetricKeyType, 'ec', 'an ECDSA key (P-256)');
  t.equal(ca.publicKey.asymmetricKeyDetails?.namedCurve, 'prime256v1');
  t.ok(ca.verify(ca.publicKey), 'self-signed, and the signature holds');
  t.equal(await c.get('a.egress.test'), '200');
  t.equal(await c.get('a.egress.test'), '200');
  const ev2 = await c.proxy.stop();
  t.equal(ev2.leaf_certificates_issued, 1, 'second connection reused the cached leaf');
  t.same(
    ev2.keys.map((k) => [k.role, k.algorithm, k.der_bytes >= 138, k.readback_all_zero]),
    [
      ['egress_ca', 'ECDSA-P256', true, true],
      ['egress_leaf', 'ECDSA-P256', true, true],
    ],
    'both private keys overwritten and read back as zeros',
  );
});

t.test('invalid config is refused at start, naming the problem', async (t) => {
  await t.rejects(
    startEgressProxy({
      capsuleId: 'cap_bad',
      tcp: { host: '127.0.0.1', port: 0 },
      profileRules: [{ kind: 'domain', value: 'a b', port: 443 }],
      declaration: [],
      onEvent: () => {},
    }),
    /profileRules\[0\]\.value/,
  );
  await t.rejects(
    startEgressProxy({
      capsuleId: 'cap_bad',
      tcp: { host: '127.0.0.1', port: 0 },
      profileRules: [],
      declaration: [],
      onEvent: () => {},
      mcpPolicy: { allowed_tools: 'x' as unknown as string[] },
    }),
    /mcp_policy\.allowed_tools/,
  );
  await t.rejects(
    startEgressProxy({ capsuleId: 'cap_bad', profileRules: [], declaration: [], onEvent: () => {} }),
    /socketPath or tcp/,
  );
  await t.rejects(
    startEgressProxy({
      capsuleId: 'cap_bad',
      tcp: { host: '127.0.0.1', port: 0 },
      profileRules: [],
      declaration: [],
      onEvent: () => {},
      extraCaPem: '-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n',
    }),
    /extraCaPem/,
  );
});

t.test('a throwing onEvent callback does not break the proxy', async (t) => {
  const proxy = await startEgressProxy({
    capsuleId: 'cap_throw',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'a.egress.test', port: up.ports.https },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.https },
    ],
    declaration: ['a.egress.test', '127.0.0.1'],
    extraCaPem: pki.caPem,
    resolver: fakeResolver({ 'a.egress.test': '127.0.0.1' }),
    onEvent: () => {
      throw new Error('recorder down');
    },
  });
  const ca = tmp.write('throw.pem', proxy.caPem);
  const r = await run('curl', [
    '-sS',
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    '--proxy',
    `http://127.0.0.1:${proxy.tcpAddress?.port}`,
    '--cacert',
    ca,
    `https://a.egress.test:${up.ports.https}/json`,
  ]);
  t.equal(r.stdout, '200');
  t.equal(proxy.droppedCallbackErrors, 1);
  await proxy.stop();
});

t.test('stop() ends in-flight exchanges and emits their events before it resolves', async (t) => {
  const events: EgressEvent[] = [];
  const proxy = await startEgressProxy({
    capsuleId: 'cap_inflight',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'a.egress.test', port: up.ports.loris },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.loris },
    ],
    declaration: ['a.egress.test', '127.0.0.1'],
    extraCaPem: pki.caPem,
    resolver: fakeResolver({ 'a.egress.test': '127.0.0.1' }),
    onEvent: (e) => events.push(e),
  });
  const ca = tmp.write('inflight.pem', proxy.caPem);
  const client = run('curl', [
    '-sS',
    '-o',
    '/dev/null',
    '-w',
    '%{http_code}',
    '--max-time',
    '20',
    '--proxy',
    `http://127.0.0.1:${proxy.tcpAddress?.port}`,
    '--cacert',
    ca,
    `https://a.egress.test:${up.ports.loris}/json`,
  ]);
  for (let i = 0; i < 100 && up.seen.length === 0 && events.length === 0; i++)
    await new Promise((r) => setTimeout(r, 50));
  await new Promise((r) => setTimeout(r, 300)); // the request is now waiting on the dripping upstream
  await proxy.stop();
  const sealed = events.filter((e) => e.type === 'SealedHttpRequest');
  t.equal(sealed.length, 1, 'recorded before stop() resolved');
  t.equal((sealed[0] as { outcome?: string }).outcome, 'proxy_stopped');
  const r = await client;
  t.not(r.stdout, '200');
});

t.test('a slow but live upstream is served: the connect bound does not cut the wait for headers', async (t) => {
  const proxy = await startEgressProxy({
    capsuleId: 'cap_slow',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'a.egress.test', port: up.ports.https },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.https },
    ],
    declaration: ['a.egress.test', '127.0.0.1'],
    extraCaPem: pki.caPem,
    resolver: fakeResolver({ 'a.egress.test': '127.0.0.1' }),
    onEvent: () => {},
    limits: { connectTimeoutMs: 300, idleTimeoutMs: 3000, headersTimeoutMs: 3000 },
  });
  const ca = tmp.write('slow.pem', proxy.caPem);
  const r = await run('curl', [
    '-sS',
    '-w',
    ' %{http_code}',
    '--proxy',
    `http://127.0.0.1:${proxy.tcpAddress?.port}`,
    '--cacert',
    ca,
    `https://a.egress.test:${up.ports.https}/delay?ms=900`,
  ]);
  t.equal(r.stdout, 'delayed 200', r.stderr);
  await proxy.stop();
});
