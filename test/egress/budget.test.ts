// Inspection budgets: without a tool policy a "{" body streams at once; with
// one, held bytes are bounded per capsule and per process (429 past either).
import t from 'tap';
import { createServer, request, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { ByteBudget, startEgressProxy, type EgressEvent, type McpPolicy } from '../../egress-proxy/index.js';
import { fakeResolver } from './fixtures.js';

// Upstream: notes when each request's first body byte arrives, answers with the byte count.
const firstByteAt = new Map<string, number>();
const upstream = createServer((req: IncomingMessage, res) => {
  let n = 0;
  req.on('data', (c: Buffer) => {
    if (n === 0) firstByteAt.set(req.url ?? '', performance.now());
    n += c.length;
  });
  req.on('end', () => res.end(JSON.stringify({ bytes: n })));
});
await new Promise<void>((r) => upstream.listen(0, '127.0.0.1', r));
const UP = (upstream.address() as AddressInfo).port;
t.teardown(() => {
  upstream.closeAllConnections();
  upstream.close();
});

const proxy = (mcpPolicy: McpPolicy | undefined, events: EgressEvent[], budget: number, shared?: ByteBudget) =>
  startEgressProxy({
    capsuleId: 'cap_budget',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'up.test', port: UP },
      { kind: 'ip_v4', value: '127.0.0.1', port: UP },
    ],
    declaration: ['up.test', '127.0.0.1'],
    ...(mcpPolicy ? { mcpPolicy } : {}),
    resolver: fakeResolver({ 'up.test': '127.0.0.1' }),
    onEvent: (e) => events.push(e),
    limits: { inspectBudgetBytes: budget },
    ...(shared ? { processInspectBudget: shared } : {}),
  });

/** A "{" body of `size` bytes sent in 64 KiB pieces every `gapMs`; resolves with status, headers, when the last byte left. */
function slowPost(port: number, path: string, size: number, gapMs: number) {
  return new Promise<{ status: number; retryAfter: string | undefined; code: string | undefined; lastSentAt: number }>(
    (resolve) => {
      let lastSentAt = 0;
      let answered = false;
      const req = request(
        {
          host: '127.0.0.1',
          port,
          method: 'POST',
          path: `http://up.test:${UP}${path}`,
          headers: { host: `up.test:${UP}`, 'content-type': 'application/json', 'content-length': size },
          agent: false,
        },
        (res) => {
          answered = true;
          res.resume();
          res.on('end', () =>
            resolve({
              status: res.statusCode ?? 0,
              retryAfter: res.headers['retry-after'] as string | undefined,
              code: res.headers['x-capsule-egress-error'] as string | undefined,
              lastSentAt,
            }),
          );
        },
      );
      req.on('error', () => resolve({ status: 0, retryAfter: undefined, code: undefined, lastSentAt }));
      let sent = 0;
      const pump = () => {
        if (answered) return;
        const k = Math.min(64 * 1024, size - sent);
        const piece = Buffer.alloc(k, 0x20);
        if (sent === 0) piece[0] = 0x7b;
        sent += k;
        lastSentAt = performance.now();
        if (sent >= size) req.end(piece);
        else {
          req.write(piece);
          setTimeout(pump, gapMs);
        }
      };
      pump();
    },
  );
}

t.test('no mcp_policy: a "{" body streams at once and holds at most the capsule budget', async (t) => {
  const events: EgressEvent[] = [];
  const p = await proxy(undefined, events, 1024 * 1024);
  let maxHeld = 0;
  const sampler = setInterval(() => (maxHeld = Math.max(maxHeld, p.inspectBytesHeld)), 5);
  const rs = await Promise.all(
    Array.from({ length: 16 }, (_, i) => slowPost(p.tcpAddress!.port, `/nopolicy/${i}`, 512 * 1024, 50)),
  );
  clearInterval(sampler);
  t.ok(
    rs.every((r) => r.status === 200),
    'none refused: there is nothing to enforce',
  );
  t.ok(maxHeld <= 1024 * 1024, `held copies ${maxHeld} bytes <= the 1 MiB capsule budget`);
  // Buffered bodies would reach the upstream only after their last byte; streamed ones before it
  // (most of them: a loaded machine may delay a few past the client's last 50 ms gap).
  const early = rs.filter((r, i) => (firstByteAt.get(`/nopolicy/${i}`) ?? Infinity) < r.lastSentAt).length;
  t.ok(early >= 8, `${early} of 16 bodies reached the upstream before the client sent its last bytes`);
  t.equal(p.inspectBytesHeld, 0, 'all released');
  await p.stop();
});

t.test('mcp_policy: the capsule budget and the process budget each bound held bytes (429 past either)', async (t) => {
  const shared = new ByteBudget(1536 * 1024);
  const a = await proxy({ allowed_tools: ['x'] }, [], 1024 * 1024, shared);
  const b = await proxy({ allowed_tools: ['x'] }, [], 1024 * 1024, shared);
  let maxA = 0;
  let maxShared = 0;
  const sampler = setInterval(() => {
    maxA = Math.max(maxA, a.inspectBytesHeld);
    maxShared = Math.max(maxShared, shared.used);
  }, 5);
  const [ra, rb] = await Promise.all([
    Promise.all(Array.from({ length: 8 }, (_, i) => slowPost(a.tcpAddress!.port, `/a/${i}`, 512 * 1024, 20))),
    Promise.all(Array.from({ length: 8 }, (_, i) => slowPost(b.tcpAddress!.port, `/b/${i}`, 512 * 1024, 20))),
  ]);
  clearInterval(sampler);
  const all = [...ra, ...rb];
  t.ok(
    all.every((r) => r.status === 200 || r.status === 429),
    JSON.stringify(all.map((r) => r.status)),
  );
  const refused = all.filter((r) => r.status === 429);
  t.ok(refused.length >= 8, `${refused.length} refused`);
  t.ok(
    refused.every((r) => r.retryAfter === '2' && r.code === 'inspection_budget_exhausted'),
    'Retry-After and the reason',
  );
  t.ok(maxA <= 1024 * 1024, 'capsule budget held');
  t.ok(maxShared <= 1536 * 1024, 'process budget held');
  t.equal(shared.used, 0, 'all released');
  await a.stop();
  await b.stop();
});
