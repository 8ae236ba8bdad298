// Admission through the public API against a real runner whose node capacity
// is set small (runner option node_memory_mb): a create the node cannot back
// is a 503 service_unavailable with Retry-After and leaves nothing behind;
// ready reports the capacity; GET /v1/capsules/:id reports storage used and
// its bound, measured from inside the real capsule.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, start } from './harness.js';

const MB = 1024 * 1024;

for (const driver of DRIVERS) {
  t.test(`${driver}: capacity and storage`, async (t) => {
    const runner = await startRunner({ options: { node_memory_mb: '400' } });
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup(undefined, 'EU');

    const ready0 = await api.req('GET', '/v1/health/ready');
    t.equal(ready0.status, 200, ready0.text);
    t.same(ready0.body.capacity, { memory_mb: 400, committed_mb: 0, free_mb: 400, capsules: 0, max_capsules: 256 });

    const first = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
    t.equal(first.status, 201, first.text);
    const id = first.body.capsule_id ?? first.body.id;

    const full = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
    t.equal(full.status, 503, full.text);
    t.equal(full.body.error.code, 'service_unavailable');
    t.ok(Number(full.headers.get('retry-after')) > 0, `Retry-After ${full.headers.get('retry-after')}`);
    t.equal(full.body.error.retry_after, Number(full.headers.get('retry-after')));
    t.notMatch(full.text, /MB|node_memory/, 'no operator detail in the customer message');
    t.same(await runner.client.list(), [id], 'the refused capsule left nothing on the runner');

    const ready1 = await api.req('GET', '/v1/health/ready');
    t.equal(ready1.status, 200);
    t.equal(ready1.body.capacity.committed_mb, 256);
    t.equal(ready1.body.capacity.free_mb, 144);

    // Storage: write 20 MB from inside, then read the status.
    const ex = await api.req('POST', `/v1/capsules/${id}/exec`, {
      key: alice.key,
      json: { command: 'head -c 20971520 /dev/zero > /data/output/f && echo done' },
    });
    t.equal(ex.status, 200, ex.text);
    t.equal(ex.body.stdout, 'done\n');
    const st = await api.req('GET', `/v1/capsules/${id}`, { key: alice.key });
    t.equal(st.status, 200);
    t.equal(st.body.storage.limit_bytes, 192 * MB, 'three quarters of the 256 MB memory limit');
    t.ok(
      st.body.storage.used_bytes >= 20 * MB && st.body.storage.used_bytes < 22 * MB,
      `used ${st.body.storage.used_bytes}`,
    );
    t.equal(st.body.storage.memory_limit_bytes, 256 * MB);

    // Filling it from inside is ENOSPC (not an OOM kill), and the status says it is full.
    const fill = await api.req('POST', `/v1/capsules/${id}/exec`, {
      key: alice.key,
      json: { command: 'cat /dev/zero > /tmp/fill; echo "status=$?"' },
    });
    t.equal(fill.status, 200, fill.text);
    t.match(fill.body.stderr, /No space left on device/);
    t.equal(fill.body.oom_killed, false);
    const st2 = await api.req('GET', `/v1/capsules/${id}`, { key: alice.key });
    t.ok(st2.body.storage.used_bytes > 190 * MB, `full: ${st2.body.storage.used_bytes}`);

    const del = await api.req('DELETE', `/v1/capsules/${id}`, { key: alice.key });
    t.ok(del.status === 200 || del.status === 202, del.text);
    const gone = await api.req('GET', `/v1/capsules/${id}`, { key: alice.key });
    t.notOk('storage' in gone.body, 'no storage figure once destroyed');
    const again = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
    t.equal(again.status, 201, 'capacity released by destroy');
  });
}
