// The runner over TCP with mutual TLS: a control plane's client certificate
// from the operator's CA is served the same protocol as the Unix socket; a
// client without a certificate or with one from another CA is refused; a
// control plane refuses a runner whose certificate another CA issued; and
// `capsule serve` pointed at the runner with CAPSULE_RUNNERS drives a whole
// capsule lifecycle over TLS without starting a runner of its own.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RunnerClient, type RunnerTlsTarget } from '../../shared/node/runner-client.js';
import { RunnerError } from '../../shared/runner-protocol.js';
import { verifyProof } from '../../shared/proof/index.js';
import { pki } from '../helpers/cosign-signer.js';
import { startRunner } from '../helpers/runner.js';
import { dnsAddresses, RunnerFleet } from '../../control-plane/runner/index.js';
import type { RunnerRegistry } from '../../control-plane/domain/index.js';
import { freshDb, serveProcess, testMasterKeyFile } from '../control-plane/harness.js';

t.test('runner protocol over mutual TLS', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'runner-tls-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const p = pki(dir);
  p.ca('operator-ca');
  p.ca('other-ca');
  p.leaf('runner', 'operator-ca', 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n');
  p.leaf('control-plane', 'operator-ca', 'extendedKeyUsage=clientAuth\n');
  p.leaf('intruder', 'other-ca', 'extendedKeyUsage=clientAuth\n');

  const runner = await startRunner({
    options: {
      listen: '127.0.0.1:0',
      tls_ca: p.path('operator-ca.pem'),
      tls_cert: p.path('runner.pem'),
      tls_key: p.path('runner.key'),
      node_id: 'node-a',
      labels: 'zone=a',
    },
  });
  t.teardown(() => runner.stop());
  const port = Number(/listening tls 127\.0\.0\.1:(\d+)/.exec(runner.stdout())?.[1]);
  t.ok(port > 0, `the runner reports its TLS port (${port})`);
  const target = (over: Partial<RunnerTlsTarget> = {}): RunnerTlsTarget => ({
    host: '127.0.0.1',
    port,
    ca: p.read('operator-ca.pem'),
    cert: p.read('control-plane.pem'),
    key: p.read('control-plane.key'),
    ...over,
  });

  const good = new RunnerClient(target());
  t.teardown(() => good.close());
  const hello = await good.hello();
  t.equal(hello.node_id, 'node-a');
  t.same(hello.labels, { zone: 'a' });
  t.ok(hello.capacity && hello.capacity.max_capsules > 0, 'capacity over TLS as over the socket');

  const refused = async (label: string, over: Partial<RunnerTlsTarget>) => {
    const c = new RunnerClient(target(over));
    try {
      await c.hello();
      t.fail(`${label}: answered`);
    } catch (e) {
      t.ok(e instanceof RunnerError && e.code === 'unavailable', `${label}: refused (${(e as Error).message})`);
    } finally {
      await c.close();
    }
  };
  await refused('a client certificate from another CA', { cert: p.read('intruder.pem'), key: p.read('intruder.key') });
  await refused('no client certificate', { cert: '', key: '' });
  await refused('a runner whose certificate is not from the CA the control plane trusts', {
    ca: p.read('other-ca.pem'),
  });

  // DNS discovery: every address of the name is dialled, the certificate must carry the name.
  const heartbeats: string[] = [];
  const registry = {
    heartbeat: async (n: { node_id: string; address: string }) => void heartbeats.push(`${n.node_id}@${n.address}`),
    runnerNodes: async () => [],
  } as unknown as RunnerRegistry;
  const fleet = new RunnerFleet({
    addresses: dnsAddresses('localhost', port),
    connect: (a) =>
      new RunnerClient({
        ...a,
        ca: p.read('operator-ca.pem'),
        cert: p.read('control-plane.pem'),
        key: p.read('control-plane.key'),
      }),
    registry,
    nowMs: () => Date.now(),
    heartbeatMs: 60_000,
    affinity: null,
    log: { warn: () => undefined },
  });
  await fleet.start();
  t.same(
    fleet.nodes().map((n) => n.node_id),
    ['node-a'],
    'dns:localhost finds the runner; its certificate names localhost',
  );
  t.ok(heartbeats.includes(`node-a@127.0.0.1:${port}`), 'the registry heard its heartbeat under its address');
  await fleet.close();

  // capsule serve over TLS: no local runner, the whole lifecycle on the remote one.
  const db = await freshDb('sqlite');
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-tls-'));
  t.teardown(async () => {
    await db.drop();
    rmSync(dataDir, { recursive: true, force: true });
  });
  const serve = await serveProcess(
    {
      PATH: process.env.PATH,
      DATABASE_URL: db.url,
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
      CAPSULE_RATE_LIMITS: 'off',
      LOG_LEVEL: 'warn',
      CAPSULE_RUNNERS: `127.0.0.1:${port}`,
      CAPSULE_RUNNER_CLIENT_CA_FILE: p.path('operator-ca.pem'),
      CAPSULE_RUNNER_CLIENT_CERT_FILE: p.path('control-plane.pem'),
      CAPSULE_RUNNER_CLIENT_KEY_FILE: p.path('control-plane.key'),
    },
    dataDir,
  );
  t.teardown(async () => {
    serve.child.kill('SIGTERM');
    await new Promise((r) => serve.child.once('exit', r));
  });
  const { api } = serve;
  t.equal((await api.req('GET', '/v1/health/ready')).status, 200, 'ready on the remote runner');
  const u = await api.signup();
  const c = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
  t.equal(c.status, 201, c.text);
  t.ok((await good.list()).includes(c.body.id), 'the capsule lives on the TLS runner');
  const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, {
    key: u.key,
    json: { command: 'echo over-tls' },
  });
  t.equal(ex.body.stdout, 'over-tls\n');
  const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: u.key });
  t.equal(d.status, 200);
  t.ok(verifyProof(d.body.cdp).valid);
});

t.test('the configuration refuses a plaintext or half-configured network runner', async (t) => {
  const { loadConfig, ConfigError } = await import('../../control-plane/config.js');
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-cfg-'));
  const base = { CAPSULE_DATA_DIR: dataDir, CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir) };
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  t.throws(() => loadConfig({ ...base, CAPSULE_RUNNERS: '10.0.0.5:7443' }, {}), ConfigError, 'no client material');
  t.throws(() => loadConfig({ ...base, CAPSULE_RUNNERS: 'a:1,b:70000' }, {}), /expected host:port/);
  t.throws(() => loadConfig({ ...base, CAPSULE_RUNNERS: 'a:1,a:1' }, {}), /listed twice/);
  t.throws(() => loadConfig({ ...base, CAPSULE_RUNNER_LOST_AFTER_MS: '5000' }, {}), /only with CAPSULE_RUNNERS/);
  t.throws(() => loadConfig({ ...base, CAPSULE_RUNNER_CLIENT_CA_FILE: '/x' }, {}), /only with CAPSULE_RUNNERS/);
});
