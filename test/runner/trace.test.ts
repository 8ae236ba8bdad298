// Request and trace ids cross into the runner: a runner call made for an
// HTTP request carries its X-Svc-Request-Id and X-Svc-Trace-Id in the frame;
// the runner's log line of a failed call names both (and no customer bytes),
// and its answer echoes them.
import t from 'tap';
import { startRunner } from '../helpers/runner.js';
import { until } from '../helpers/until.js';
import { start } from '../control-plane/harness.js';
import { requestTrace } from '../../shared/node/trace.js';

t.test('trace ids reach the runner and its logs', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client, { CAPSULE_RATE_LIMITS: 'off' });
  t.teardown(() => s.close());
  const u = await s.api.signup();
  const c = await s.api.req('POST', '/v1/capsules', { key: u.key, json: {} });
  t.equal(c.status, 201);
  const trace = `trace-${Date.now()}`;
  const secretName = 'no-such-file-customer-name.csv';
  const r = await s.api.req('GET', `/v1/capsules/${c.body.id}/output/${secretName}`, {
    key: u.key,
    headers: { 'x-svc-trace-id': trace },
  });
  t.equal(r.status, 404, r.text);
  const requestId = r.headers.get('x-svc-request-id');
  t.ok(requestId, 'the API named its request id');
  await until(() => runner.stderr().includes(`"trace_id":"${trace}"}\n`), 5000);
  const line = runner
    .stderr()
    .split('\n')
    .filter((l) => l.startsWith('{'))
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .find((l) => l.trace_id === trace);
  t.same(
    line,
    {
      svc: 'runner',
      msg: 'request failed',
      method: 'read_output',
      code: 'not_found',
      request_id: requestId,
      trace_id: trace,
    },
    "the runner's log line names the API's request and trace ids",
  );
  t.notOk(runner.stderr().includes(secretName), 'the log line carries no customer file name');
  // Outside any request the frame carries no trace, and the runner logs none. The log line comes
  // through the runner's stderr, apart from its answer: awaited, not assumed to be there already.
  const failed = (): string[] =>
    runner
      .stderr()
      .split('\n')
      .filter((l) => l.includes('"request failed"'));
  const before = failed().length;
  await runner.client.readOutput(c.body.id, 'x').catch(() => undefined);
  t.ok(await until(() => failed().length > before, 5000), 'the runner logged the failed call');
  t.notOk(/request_id/.test(failed().at(-1) ?? ''), 'no ids when the call belongs to no request');
  // Inside a trace scope, a direct client call carries it too.
  await requestTrace
    .run({ request_id: 'req_direct', trace_id: null }, () => runner.client.readOutput(c.body.id, 'y'))
    .catch(() => undefined);
  t.ok(
    await until(() => runner.stderr().includes('"request_id":"req_direct"'), 5000),
    'its log line names the request id',
  );
});
