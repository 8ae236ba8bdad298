// The workload corpus inside real capsules under the shipped seccomp policy:
// every workload customers run (sh + coreutils, python3, node, HTTPS through
// the sealed egress relay from curl, python3 and node) must succeed with the
// exact expected output. The allowlist was cut down against this corpus.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { runCorpus, startEgressFixture } from './workloads/corpus.js';

t.test('the workload corpus runs under the allowlist', async (t) => {
  const fx = await startEgressFixture();
  t.teardown(() => fx.close());
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'plain', memory_mb: 256 });
  await r.client.create({
    capsule_id: 'egress',
    memory_mb: 256,
    egress: { proxy_socket: fx.proxySocket, ca_pem: fx.caPem },
  });
  const results = await runCorpus(r.client, { plain: 'plain', egress: 'egress' }, fx.httpsPort);
  t.equal(results.length, 6);
  for (const res of results) t.ok(res.ok, `${res.name}${res.detail ? `: ${res.detail}` : ''}`);
});
