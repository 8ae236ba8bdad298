// Each runner method's request is parsed with its schema at the runner's
// edge: wrong shapes are refused as `invalid` naming the field, before any
// handler sees them.
import t from 'tap';
import { connect } from 'node:net';
import { encodeFrame, FRAME_PREFIX_BYTES } from '../../shared/node/framing.js';
import { describeIssue, RUNNER_REQUEST_SCHEMAS } from '../../shared/runner-protocol.js';
import { startRunner } from '../helpers/runner.js';

function call(socketPath: string, header: Record<string, unknown>): Promise<Record<string, any>> {
  return new Promise((resolve, reject) => {
    const s = connect(socketPath);
    let buf = Buffer.alloc(0);
    s.on('data', (b: Buffer) => {
      buf = Buffer.concat([buf, b]);
      if (buf.length < FRAME_PREFIX_BYTES) return;
      const hLen = buf.readUInt32BE(0);
      if (buf.length < FRAME_PREFIX_BYTES + hLen) return;
      s.destroy();
      resolve(JSON.parse(buf.subarray(FRAME_PREFIX_BYTES, FRAME_PREFIX_BYTES + hLen).toString('utf8')));
    });
    s.on('error', reject);
    s.write(encodeFrame(header, null, { maxHeaderBytes: 1 << 20, maxBodyBytes: 1 << 20 }));
  });
}

t.test('schemas name the field of the first problem', async (t) => {
  const bad = RUNNER_REQUEST_SCHEMAS.create.safeParse({
    capsule_id: 'a',
    memory_mb: 64,
    app_files: [
      { filename: 'ok', content_b64: '' },
      { filename: 7, content_b64: '' },
    ],
  });
  t.equal(bad.success, false);
  if (!bad.success) t.match(describeIssue(bad.error), /^app_files\[1\]\.filename: /);
  const ok = RUNNER_REQUEST_SCHEMAS.exec.safeParse({
    capsule_id: 'a',
    command: 'true',
    timeout_ms: 5,
    input_b64: null,
    env: null,
    extra: 'dropped',
  });
  t.equal(ok.success, true);
  if (ok.success) t.same(ok.data, { capsule_id: 'a', command: 'true', timeout_ms: 5 }, 'nulls read as absent');
  const cwd = RUNNER_REQUEST_SCHEMAS.exec.safeParse({ capsule_id: 'a', command: 'x', timeout_ms: 1, cwd: '/etc' });
  t.equal(cwd.success, false);
  if (!cwd.success) t.match(describeIssue(cwd.error), /^cwd: /);
});

t.test('the runner refuses wrong shapes by field before any handler runs', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'shape', memory_mb: 64 });
  const cases: [Record<string, unknown>, RegExp][] = [
    [{ method: 'exec', params: { capsule_id: 'shape', command: 5, timeout_ms: 1000 } }, /^command: /],
    [{ method: 'exec', params: { capsule_id: 'shape', command: 'true' } }, /^timeout_ms: /],
    [{ method: 'exec', params: { capsule_id: 'shape', command: 'true', timeout_ms: 9, env: { A: 1 } } }, /^env\.A: /],
    [{ method: 'upload', params: { capsule_id: ['shape'], filename: 'x' } }, /^capsule_id: /],
    [{ method: 'create', params: { capsule_id: 'n', memory_mb: '64' } }, /^memory_mb: /],
    [{ method: 'create', params: { capsule_id: 'n', memory_mb: 64, egress: { proxy_socket: 1 } } }, /^egress\./],
    [{ method: 'destroy', params: {} }, /^capsule_id: /],
  ];
  let id = 1;
  for (const [h, message] of cases) {
    const reply = await call(r.socketPath, { id, ...h });
    t.match(reply, { id, ok: false, error: { code: 'invalid', message } }, JSON.stringify(h));
    id++;
  }
  t.same(await r.client.list(), ['shape'], 'nothing was created or destroyed by a refused request');
  const ran = await r.client.exec({ capsule_id: 'shape', command: 'echo fine', timeout_ms: 5000 });
  t.equal(ran.stdout, 'fine\n');
});
