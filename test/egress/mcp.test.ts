// MCP tools/call policy through a real proxy: allowed and prohibited tools,
// recording of allowed calls, and each SPEC item 9 fail-open case by name.
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { startEgressProxy, type EgressEvent, type McpPolicy } from '../../egress-proxy/index.js';
import { canonicalize as jcs, merkleLeafHash } from '../../shared/proof/index.js';
import { eventsOf, fakeResolver, makePki, run, sha512, startUpstreams, tempDir } from './fixtures.js';

const pki = makePki(['mcp.egress.test', 'api.egress.test']);
const up = await startUpstreams(pki);
const tmp = tempDir('egress-mcp-test-');
const P = up.ports;

async function proxyWith(mcpPolicy: McpPolicy | undefined, events: EgressEvent[], limits = {}) {
  const proxy = await startEgressProxy({
    capsuleId: 'cap_test_mcp',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: 'mcp.egress.test', port: P.https },
      { kind: 'ip_v4', value: '127.0.0.1', port: P.https },
    ],
    declaration: ['mcp.egress.test', '127.0.0.1'],
    ...(mcpPolicy ? { mcpPolicy } : {}),
    extraCaPem: pki.caPem,
    resolver: fakeResolver({ 'mcp.egress.test': '127.0.0.1', 'api.egress.test': '127.0.0.1' }),
    onEvent: (e) => events.push(e),
    limits,
  });
  const url = `http://127.0.0.1:${proxy.tcpAddress?.port}`;
  const ca = tmp.write(`ca-${proxy.tcpAddress?.port}.pem`, proxy.caPem);
  const post = async (path: string, body: string | Buffer, headers: string[] = [], host = 'mcp.egress.test') => {
    const file = tmp.write(`body-${Math.random().toString(36).slice(2)}`, body as string);
    const r = await run('curl', [
      '-sS',
      '--max-time',
      '20',
      '--proxy',
      url,
      '--cacert',
      ca,
      '-w',
      '\n%{http_code}',
      '-X',
      'POST',
      '-H',
      'content-type: application/json',
      '-H',
      'accept: application/json, text/event-stream',
      ...headers.flatMap((h) => ['-H', h]),
      '--data-binary',
      `@${file}`,
      `https://${host}:${P.https}${path}`,
    ]);
    const i = r.stdout.lastIndexOf('\n');
    return { status: Number(r.stdout.slice(i + 1)), body: r.stdout.slice(0, i), stderr: r.stderr };
  };
  return { proxy, post };
}

const call = (name: string, args: unknown, id: number | string = 1) =>
  JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args } });
const sawTool = (name: string) => up.seen.some((s) => s.body.toString().includes(`"${name}"`));

const events: EgressEvent[] = [];
const policy = await proxyWith(
  { allowed_tools: ['search', 'read_file'], prohibited_tools: ['read_file', 'delete_all'] },
  events,
);

t.teardown(async () => {
  await policy.proxy.stop();
  await up.close();
  tmp.remove();
});

t.test('allowed tool is forwarded and recorded as McpToolInvoked with canonical-JSON hashes', async (t) => {
  events.length = 0;
  const args = { query: 'rare disease', limit: 5, filters: { b: 1, a: [true, null] } };
  const r = await policy.post('/mcp', call('search', args, 7), ['Mcp-Session-Id: sess-abc']);
  t.equal(r.status, 200, r.stderr);
  const reply = JSON.parse(r.body);
  t.equal(reply.id, 7);
  const [mcp] = eventsOf(events, 'McpToolInvoked');
  t.ok(mcp);
  t.equal(mcp?.tool_name, 'search');
  t.equal(mcp?.tool_args_hash, sha512(jcs(args)));
  t.equal(mcp?.tool_result_hash, sha512(jcs(reply.result)));
  t.equal(mcp?.outcome, 'success');
  t.equal(mcp?.client_session_id, 'sess-abc');
  t.equal(eventsOf(events, 'SealedHttpRequest').length, 1);
  t.equal(mcp?.exchange, eventsOf(events, 'SealedHttpRequest')[0]?.exchange);
  t.notMatch(JSON.stringify(events), /rare disease/, 'no argument bytes in events');
});

t.test('allowed tool over SSE: streaming events plus McpToolInvoked with the result found in the stream', async (t) => {
  events.length = 0;
  const r = await policy.post('/mcp-sse', call('search', { q: 'x' }, 'abc'));
  t.equal(r.status, 200);
  t.match(r.body, /ran search/);
  const chunks = eventsOf(events, 'StreamingEgressChunk');
  t.equal(eventsOf(events, 'StreamingEgressStarted')[0]?.framing, 'sse');
  // Three small SSE events (comment, progress, response) share one chunk (under minSseChunkBytes): one segment.
  t.equal(chunks.length, 1);
  const bodyDigest = Buffer.from(sha512(r.body).slice(7), 'hex');
  t.same(
    chunks.map((c) => [c.first_chunk, c.chunks, c.bytes, c.segment_root]),
    [[0, 1, Buffer.byteLength(r.body), `sha512:${Buffer.from(merkleLeafHash(bodyDigest)).toString('hex')}`]],
  );
  const [mcp] = eventsOf(events, 'McpToolInvoked');
  const resultLine = r.body
    .split('\n')
    .filter((l) => l.startsWith('data: '))
    .map((l) => JSON.parse(l.slice(6)))
    .find((m) => m.id === 'abc');
  t.equal(mcp?.tool_result_hash, sha512(jcs(resultLine.result)));
  t.equal(mcp?.outcome, 'success');
  t.equal(eventsOf(events, 'StreamingEgressCompleted')[0]?.chunks, 1);
});

t.test('prohibited tool is rejected before forwarding with a readable JSON-RPC error, and not recorded', async (t) => {
  events.length = 0;
  const r = await policy.post('/mcp', call('delete_all', { confirm: true }, 42));
  t.equal(r.status, 200, 'HTTP 200 carrying a JSON-RPC error (documented in docs/EGRESS.md)');
  const reply = JSON.parse(r.body);
  t.equal(reply.id, 42);
  t.equal(reply.error.code, -32001);
  t.match(reply.error.message, /delete_all/);
  t.notOk(sawTool('delete_all'), 'upstream never saw it');
  t.same(events, [], 'denied calls are not recorded');
});

t.test('a tool outside allowed_tools is rejected', async (t) => {
  const r = await policy.post('/mcp', call('exec_shell', {}));
  t.equal(JSON.parse(r.body).error.code, -32001);
  t.notOk(sawTool('exec_shell'));
});

t.test('prohibited_tools wins over allowed_tools', async (t) => {
  const r = await policy.post('/mcp', call('read_file', { path: '/etc/passwd' }));
  t.equal(JSON.parse(r.body).error.code, -32001);
  t.notOk(sawTool('read_file'));
});

t.test('a JSON-RPC request that is not tools/call passes and is recorded only as SealedHttpRequest', async (t) => {
  events.length = 0;
  const r = await policy.post('/mcp', JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }));
  t.equal(r.status, 200);
  t.equal(eventsOf(events, 'McpToolInvoked').length, 0);
  t.equal(eventsOf(events, 'SealedHttpRequest').length, 1);
});

t.test('fail-open: compressed body (Content-Encoding: gzip) is forwarded without a tool check', async (t) => {
  events.length = 0;
  const before = up.seen.length;
  const r = await policy.post('/mcp', gzipSync(call('delete_all', { gz: 1 })), ['Content-Encoding: gzip']);
  t.equal(r.status, 200);
  t.equal(up.seen.length, before + 1, 'forwarded to the upstream');
  t.ok(
    up.seen
      .at(-1)
      ?.body.subarray(0, 2)
      .equals(Buffer.from([0x1f, 0x8b])),
    'gzip bytes arrived unmodified',
  );
  t.equal(eventsOf(events, 'SealedHttpRequest').length, 1, 'still recorded as a request');
  t.equal(eventsOf(events, 'McpToolInvoked').length, 0, 'no tool event: the tool was not identified');
});

t.test('fail-open: JSON-RPC batch array is forwarded without a tool check', async (t) => {
  const body = `[${call('delete_all', { batch: 1 }, 1)}]`;
  const r = await policy.post('/mcp', body);
  t.equal(r.status, 200);
  t.ok(sawTool('delete_all'), 'the prohibited tool inside a batch reached the upstream');
  t.equal(JSON.parse(r.body)[0].result.isError, false);
});

t.test('fail-open: malformed envelope (no "jsonrpc":"2.0") is forwarded without a tool check', async (t) => {
  const before = up.seen.length;
  const r = await policy.post(
    '/mcp',
    JSON.stringify({ id: 9, method: 'tools/call', params: { name: 'delete_all', arguments: { malformed: 1 } } }),
  );
  t.equal(r.status, 200);
  t.equal(up.seen.length, before + 1);
  t.match(up.seen.at(-1)?.body.toString() ?? '', /"malformed":1/);
});

t.test('fail-open cases still get the destination check', async (t) => {
  const body = `[${call('delete_all', {}, 1)}]`;
  const r = await policy.post('/mcp', body, [], 'api.egress.test');
  t.not(r.status, 200);
  t.match(r.stderr, /403/);
});

t.test('with mcp_policy, a body over the inspection bound is refused (413), not forwarded unchecked', async (t) => {
  const ev: EgressEvent[] = [];
  const small = await proxyWith({ prohibited_tools: ['delete_all'] }, ev, { maxInspectBytes: 1024 });
  const before = up.seen.length;
  const r = await small.post('/mcp', call('delete_all', { pad: 'x'.repeat(4096) }));
  t.equal(r.status, 413);
  t.equal(up.seen.length, before);
  const upload = await small.post('/json', Buffer.alloc(64 * 1024, 0x41));
  t.equal(
    upload.status,
    200,
    'a body that cannot be a tools/call object (first byte not "{") streams at once, any size',
  );
  t.equal(JSON.parse(upload.body).echo_sha512, sha512(Buffer.alloc(64 * 1024, 0x41)));
  const batch = await small.post('/mcp', `[${call('delete_all', { pad: 'y'.repeat(4096) })}]`);
  t.equal(batch.status, 200, 'fail-open: a batch array over the bound is forwarded like any batch');
  await small.proxy.stop();
});

t.test('no mcp_policy: unrestricted at tool level, calls still recorded', async (t) => {
  const ev: EgressEvent[] = [];
  const open = await proxyWith(undefined, ev);
  const r = await open.post('/mcp', call('delete_all', { ok: 1 }, 3));
  t.equal(r.status, 200);
  t.equal(JSON.parse(r.body).id, 3);
  t.equal(eventsOf(ev, 'McpToolInvoked')[0]?.tool_name, 'delete_all');
  await open.proxy.stop();
});
