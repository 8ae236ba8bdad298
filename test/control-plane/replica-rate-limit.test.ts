// An account's rate_limit_rpm across two control planes on one PostgreSQL
// database: requests through either replica count into one window, so the
// limit holds instead of doubling; the answer past it is 429 with Retry-After.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { envelope, freshDb, start } from './harness.js';

t.test('postgresql: one account limit across two replicas', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const db = await freshDb('postgresql');
  t.teardown(() => db.drop());
  const a = await start('postgresql', runner.client, {}, db);
  t.teardown(() => a.close());
  const b = await start('postgresql', runner.client, {}, db);
  t.teardown(() => b.close());
  // Windows are aligned to the minute: start well inside one, so the count is not split by a boundary.
  const toNext = 60_000 - (Date.now() % 60_000);
  if (toNext < 10_000) await new Promise((r) => setTimeout(r, toNext + 100));
  const u = await a.api.signup();
  const me = await a.api.req('GET', '/v1/customers/me', { key: u.key });
  const rpm = me.body.limits?.rate_limit_rpm ?? 20;
  t.ok(rpm > 0 && rpm <= 200, `the account's limit (${rpm} per minute)`);
  let ok = 1; // the request above
  let refused = null as Awaited<ReturnType<typeof a.api.req>> | null;
  for (let i = 0; i < rpm + 5 && !refused; i++) {
    const r = await (i % 2 ? a : b).api.req('GET', '/v1/customers/me', { key: u.key });
    if (r.status === 200) ok++;
    else refused = r;
  }
  t.ok(refused, 'refused past the limit');
  t.equal(ok, rpm, 'exactly the limit passed, counted across both replicas');
  envelope(t, refused!, 429, 'rate_limited');
  t.ok(Number(refused!.headers.get('retry-after')) >= 1, 'Retry-After');
});
