// A capsule whose requests outrun its recorder: the proxy keeps at most
// maxQueuedEvents events unsettled, drops the rest, and says so in one
// ActivityTruncated (same shape as the control plane's trail cap event).
import t from 'tap';
import { request } from 'node:http';
import { startEgressProxy, type EgressEvent } from '../../egress-proxy/index.js';
import { fakeResolver, makePki, startUpstreams } from './fixtures.js';

const pki = makePki(['api.egress.test']);
const up = await startUpstreams(pki);
t.teardown(() => up.close());

const get = (port: number, n: number) =>
  new Promise<number>((resolve) => {
    const req = request(
      {
        host: '127.0.0.1',
        port,
        method: 'GET',
        path: `http://api.egress.test:${up.ports.http}/json?n=${n}`,
        headers: { host: `api.egress.test:${up.ports.http}` },
        agent: false,
      },
      (res) => {
        res.resume();
        res.on('end', () => resolve(res.statusCode ?? 0));
      },
    );
    req.on('error', () => resolve(0));
    req.end();
  });

t.test('a stalled recorder: bounded queue, drops counted, one ActivityTruncated at stop', async (t) => {
  const stored: EgressEvent[] = [];
  const release: (() => void)[] = [];
  let maxPending = 0;
  const proxy = await startEgressProxy({
    capsuleId: 'cap_queue',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'api.egress.test', port: up.ports.http },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.http },
    ],
    declaration: ['api.egress.test', '127.0.0.1'],
    resolver: fakeResolver({ 'api.egress.test': '127.0.0.1' }),
    // The recorder stalls (a database that stopped answering): nothing settles until released.
    onEvent: (e) =>
      new Promise<void>((res) =>
        release.push(() => {
          stored.push(e);
          res();
        }),
      ),
    limits: { maxQueuedEvents: 32 },
  });
  const port = proxy.tcpAddress!.port;
  const statuses: number[] = [];
  for (let round = 0; round < 6; round++) {
    statuses.push(...(await Promise.all(Array.from({ length: 50 }, (_, i) => get(port, round * 50 + i)))));
    maxPending = Math.max(maxPending, proxy.queuedEvents);
  }
  t.ok(
    statuses.every((s) => s === 200),
    'the capsule is served even while its events are dropped',
  );
  t.equal(maxPending, 32, 'never more than maxQueuedEvents unsettled');
  t.equal(release.length, 32, 'only 32 reached the stalled recorder');
  const stopped = proxy.stop();
  await new Promise((r) => setImmediate(r));
  // stop() reports the drops before it resolves (they precede the capsule's destruction in the trail).
  for (const r of release.splice(0)) r();
  await stopped;
  await new Promise((r) => setImmediate(r));
  for (const r of release.splice(0)) r();
  const trunc = stored.filter((e) => e.type === 'ActivityTruncated');
  t.equal(trunc.length, 1);
  const sealed = stored.filter((e) => e.type === 'SealedHttpRequest').length;
  t.same(trunc[0], {
    type: 'ActivityTruncated',
    at: trunc[0]!.at,
    dropped_events: 300 - sealed,
    first_dropped_type: 'SealedHttpRequest',
    reason: 'egress_event_queue_full',
  });
  t.equal(sealed, 32, 'recorded + dropped = every request');
  t.equal(stored.at(-1)?.type, 'ActivityTruncated', 'the report is the last event');
  t.equal(proxy.droppedCallbackErrors, 0);
});

t.test('a recorder that keeps up drops nothing', async (t) => {
  const stored: EgressEvent[] = [];
  const proxy = await startEgressProxy({
    capsuleId: 'cap_queue2',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.http },
      { kind: 'domain', value: 'api.egress.test', port: up.ports.http },
    ],
    declaration: ['api.egress.test', '127.0.0.1'],
    resolver: fakeResolver({ 'api.egress.test': '127.0.0.1' }),
    onEvent: async (e) => {
      await new Promise((r) => setImmediate(r));
      stored.push(e);
    },
    limits: { maxQueuedEvents: 32 },
  });
  for (let i = 0; i < 100; i++) await get(proxy.tcpAddress!.port, i);
  await proxy.stop();
  await new Promise((r) => setTimeout(r, 20));
  t.equal(stored.filter((e) => e.type === 'SealedHttpRequest').length, 100);
  t.notOk(stored.some((e) => e.type === 'ActivityTruncated'));
});
