// The events of one exchange as a pure function of what it observed.
import t from 'tap';
import { createHash } from 'node:crypto';
import { exchangeEvents, type ExchangeRecord } from '../../egress-proxy/exchange-events.js';
import { canonicalRequest, requestCanonicalHash } from '../../egress-proxy/index.js';

const h = (s: string) => `sha512:${createHash('sha512').update(s).digest('hex')}` as const;
const base: ExchangeRecord = {
  exchange: 7,
  startedAt: '2026-01-01T00:00:00.000000Z',
  endedAt: '2026-01-01T00:00:01.000000Z',
  method: 'POST',
  target: { scheme: 'https', host: 'api.test', port: 443 },
  pathAndQuery: '/mcp?x=1',
  requestHeaders: { 'content-type': 'application/json', 'mcp-session-id': 's1' },
  requestBodyHash: h('body'),
  requestBodyBytes: 4,
  status: 200,
  responseBodyHash: h('resp'),
  responseBodyBytes: 4,
  streamed: false,
  tls: null,
  durationMs: 12.5,
  outcome: 'completed',
  stream: null,
  tool: null,
};

t.test('a plain exchange is one SealedHttpRequest with the canonical request hash', async (t) => {
  const [e, ...rest] = exchangeEvents(base);
  t.equal(rest.length, 0);
  t.match(e, {
    type: 'SealedHttpRequest',
    at: base.startedAt,
    exchange: 7,
    status: 200,
    response_body_hash: h('resp'),
    duration_ms: 12.5,
  });
  t.equal(
    (e as { request_canonical_hash: string }).request_canonical_hash,
    requestCanonicalHash(
      canonicalRequest('POST', 'https', 'api.test', 443, '/mcp?x=1', base.requestHeaders, h('body')),
    ),
  );
});

t.test('no status: no response hash, whatever was gathered', async (t) => {
  const [e] = exchangeEvents({ ...base, status: null, outcome: 'upstream_unreachable' });
  t.match(e, { status: null, response_body_hash: null, outcome: 'upstream_unreachable' });
});

t.test(
  'stream and tool call: Completed first (dated at the end), then SealedHttpRequest, then McpToolInvoked',
  async (t) => {
    const evs = exchangeEvents({
      ...base,
      streamed: true,
      stream: { chunks: 3, segments: 3, root: Buffer.alloc(64, 1) },
      tool: { call: { id: 1, toolName: 'search', args: { q: 'x' } }, result: { outcome: 'success', hash: h('r') } },
    });
    t.same(
      evs.map((e) => e.type),
      ['StreamingEgressCompleted', 'SealedHttpRequest', 'McpToolInvoked'],
    );
    t.match(evs[0], { at: base.endedAt, chunks: 3, segments: 3, merkle_root: `sha512:${'01'.repeat(64)}` });
    t.match(evs[2], {
      tool_name: 'search',
      tool_args_hash: h('{"q":"x"}'),
      tool_result_hash: h('r'),
      client_session_id: 's1',
      outcome: 'success',
    });
  },
);
