// GET /metrics: Prometheus text exposition with request counts and latency
// by route pattern (never raw ids), the runner's live capsules and memory,
// parsed back here; the operator's bearer token enforced when set.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { envelope, start } from './harness.js';

/** Sample lines of the exposition: name{labels} value. */
function samples(text: string): { name: string; labels: Record<string, string>; value: number }[] {
  return text
    .split('\n')
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$/.exec(l);
      if (!m) throw new Error(`not an exposition line: ${l}`);
      const labels: Record<string, string> = {};
      for (const p of (m[2] ?? '').match(/[a-z_]+="(?:[^"\\]|\\.)*"/g) ?? []) {
        const eq = p.indexOf('=');
        labels[p.slice(0, eq)] = p.slice(eq + 2, -1);
      }
      return { name: m[1]!, labels, value: Number(m[3]) };
    });
}

t.test('metrics', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client, {
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_METRICS_TOKEN: 'scrape-secret',
  });
  t.teardown(s.close);
  const { api } = s;
  const u = await api.signup();
  const c = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
  for (let i = 0; i < 3; i++)
    await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key: u.key, json: { command: 'true' } });

  envelope(t, await api.req('GET', '/metrics'), 401, 'invalid_api_key');
  envelope(t, await api.req('GET', '/metrics', { headers: { authorization: 'Bearer wrong' } }), 401, 'invalid_api_key');
  const m = await api.req('GET', '/metrics', { headers: { authorization: 'Bearer scrape-secret' } });
  t.equal(m.status, 200);
  t.match(m.headers.get('content-type'), /^text\/plain; version=0\.0\.4/);
  const all = samples(m.text);
  const execs = all.find(
    (x) =>
      x.name === 'capsule_http_requests_total' &&
      x.labels.route === '/v1/capsules/:id/exec' &&
      x.labels.method === 'POST' &&
      x.labels.status === '200',
  );
  t.equal(execs?.value, 3, 'three execs counted under the route pattern');
  t.notOk(m.text.includes(c.body.id), 'no capsule id in any label');
  t.notOk(m.text.includes(u.key), 'no key');
  const hist = all.find(
    (x) => x.name === 'capsule_http_request_duration_seconds_count' && x.labels.route === '/v1/capsules/:id/exec',
  );
  t.equal(hist?.value, 3, 'exec latency histogram');
  t.equal(all.find((x) => x.name === 'capsule_runner_up')?.value, 1);
  t.equal(all.find((x) => x.name === 'capsule_runner_capsules')?.value, 1, 'one live capsule on the runner');
  t.ok(
    all.some((x) => x.name === 'capsule_process_resident_memory_bytes'),
    'process metrics',
  );
  await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: u.key });
  const after = samples(
    (await api.req('GET', '/metrics', { headers: { authorization: 'Bearer scrape-secret' } })).text,
  );
  t.equal(after.find((x) => x.name === 'capsule_runner_capsules')?.value, 0, 'read at scrape time');
  t.equal(
    after.find((x) => x.name === 'capsule_proof_signing_seconds_count' && x.labels.outcome === 'signed')?.value,
    1,
    'the destroy signed one proof',
  );
  t.equal(after.find((x) => x.name === 'capsule_unsigned_proofs')?.value, 0, 'no proof waits for the key');
  t.equal(after.find((x) => x.name === 'capsule_webhook_deliveries_pending')?.value, 0, 'no webhook queued');
});
