// Hash building blocks: SSE/blocks chunking,
// minimal JCS, MCP body classification.
import { createHash } from 'node:crypto';
import t from 'tap';
import { canonicalize as jcs } from '../../shared/proof/index.js';
import { inspectBody, toolAllowed } from '../../egress-proxy/mcp-policy.js';
import { StreamChunker, type ChunkDone } from '../../egress-proxy/sse.js';

function chunk(sse: boolean, max: number, parts: string[]): { chunks: ChunkDone[]; total: number } {
  const chunks: ChunkDone[] = [];
  const c = new StreamChunker({ sse, maxChunkBytes: max }, (x) => chunks.push(x));
  for (const p of parts) c.write(Buffer.from(p));
  c.end();
  return { chunks, total: chunks.reduce((a, x) => a + x.bytes, 0) };
}
const hex = (s: string) => createHash('sha512').update(s).digest('hex');

t.test('SSE chunking: one chunk per event, independent of how TCP split the bytes', async (t) => {
  const stream = 'data: a\n\nevent: x\r\ndata: b\r\n\r\ndata: c\r\rid: 4\ndata: d\n\ntrailing';
  const expected = ['data: a\n\n', 'event: x\r\ndata: b\r\n\r\n', 'data: c\r\r', 'id: 4\ndata: d\n\n', 'trailing'];
  const whole = chunk(true, 1 << 20, [stream]);
  t.same(
    whole.chunks.map((c) => c.digest.toString('hex')),
    expected.map(hex),
  );
  const bytewise = chunk(true, 1 << 20, stream.split(''));
  t.same(
    bytewise.chunks.map((c) => c.digest.toString('hex')),
    expected.map(hex),
    'byte-by-byte delivery gives the same chunks',
  );
  t.equal(whole.total, Buffer.byteLength(stream));
});

t.test('SSE chunking with a minimum: whole events share a chunk until it holds minChunkBytes', async (t) => {
  const stream = 'data: a\n\ndata: b\r\n\r\ndata: c\r\rdata: dddddddddddd\n\ndata: e\n\ntail';
  // minimum 20: "data: a\n\n" (9) + "data: b\r\n\r\n" (11) = 20 closes; then c (9) + d (20) closes; then e + tail.
  const expected = ['data: a\n\ndata: b\r\n\r\n', 'data: c\r\rdata: dddddddddddd\n\n', 'data: e\n\ntail'];
  for (const parts of [[stream], stream.split('')]) {
    const chunks: ChunkDone[] = [];
    const c = new StreamChunker({ sse: true, maxChunkBytes: 1 << 20, minChunkBytes: 20 }, (x) => chunks.push(x));
    for (const p of parts) c.write(Buffer.from(p));
    c.end();
    t.same(
      chunks.map((x) => x.digest.toString('hex')),
      expected.map(hex),
      `${parts.length} writes`,
    );
  }
});

t.test('SSE chunk longer than the bound is cut; block framing uses fixed blocks', async (t) => {
  const big = chunk(true, 4, ['data: abcdef\n\n']);
  t.same(
    big.chunks.map((c) => c.bytes),
    [4, 4, 4, 2],
  );
  const blocks = chunk(false, 5, ['abc', 'defgh', 'ij', 'k']);
  t.same(
    blocks.chunks.map((c) => c.digest.toString('hex')),
    ['abcde', 'fghij', 'k'].map(hex),
  );
});

t.test('JCS: sorted keys, no whitespace, ES number form', async (t) => {
  t.equal(
    jcs({ b: 1, a: [true, null, 'x'], c: { z: 1e21, y: 0.1 } }),
    '{"a":[true,null,"x"],"b":1,"c":{"y":0.1,"z":1e+21}}',
  );
  t.equal(jcs({ '\u20ac': 1, '\r': 2, ö: 3 }), '{"\\r":2,"ö":3,"€":1}');
  t.throws(() => jcs({ x: NaN }));
});

t.test('MCP body classification', async (t) => {
  const b = (v: unknown) => Buffer.from(typeof v === 'string' ? v : JSON.stringify(v));
  t.match(
    inspectBody(
      b({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x', arguments: { a: 1 } } }),
      undefined,
    ),
    { kind: 'tools_call', id: 1, toolName: 'x', args: { a: 1 }, notification: false },
  );
  t.match(inspectBody(b({ jsonrpc: '2.0', method: 'tools/call', params: { name: 'x' } }), undefined), {
    kind: 'tools_call',
    notification: true,
    id: null,
  });
  t.same(inspectBody(b({ jsonrpc: '2.0', id: 1, method: 'tools/list' }), undefined), { kind: 'not_tools_call' });
  t.same(inspectBody(b([{ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x' } }]), undefined), {
    kind: 'fail_open',
    reason: 'batch_array',
  });
  t.same(inspectBody(b('{"jsonrpc":"2.0",'), undefined), { kind: 'fail_open', reason: 'malformed_envelope' });
  t.same(inspectBody(b({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 7 } }), undefined), {
    kind: 'fail_open',
    reason: 'malformed_envelope',
  });
  t.same(inspectBody(b({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x' } }), 'gzip'), {
    kind: 'fail_open',
    reason: 'compressed_body',
  });
  t.match(inspectBody(b({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'x' } }), 'identity'), {
    kind: 'tools_call',
  });
  t.same(inspectBody(Buffer.from([0xff, 0xfe]), undefined), { kind: 'fail_open', reason: 'malformed_envelope' });
  t.same(inspectBody(Buffer.alloc(0), undefined), { kind: 'not_tools_call' });
});

t.test('tool policy: whitelist, blocklist wins, empty whitelist allows none, no policy allows all', async (t) => {
  t.ok(toolAllowed(undefined, 'anything'));
  t.ok(toolAllowed({ allowed_tools: ['a'] }, 'a'));
  t.notOk(toolAllowed({ allowed_tools: ['a'] }, 'b'));
  t.notOk(toolAllowed({ allowed_tools: ['a'], prohibited_tools: ['a'] }, 'a'));
  t.notOk(toolAllowed({ allowed_tools: [] }, 'a'));
  t.ok(toolAllowed({ prohibited_tools: ['b'] }, 'a'));
  t.notOk(toolAllowed({ allowed_tools: ['A'] }, 'a'), 'case-sensitive');
});
