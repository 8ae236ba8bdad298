// Invalid UTF-8 is refused at both edges, never repaired: before, `%FF` and
// `%FE` in an upload name both wrote the file "\uFFFD", and invalid bytes in
// a command ran as U+FFFD. Through the public API (real runner, real HTTP)
// and at the runner's own socket (raw frames).
import t from 'tap';
import { connect } from 'node:net';
import { FRAME_PREFIX_BYTES } from '../../shared/node/framing.js';
import { startRunner } from '../helpers/runner.js';
import { envelope, start } from './harness.js';

/** Sends one frame whose header is these raw bytes; resolves with the decoded reply header. */
function rawFrame(socketPath: string, header: Buffer): Promise<Record<string, any>> {
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
    const prefix = Buffer.alloc(FRAME_PREFIX_BYTES);
    prefix.writeUInt32BE(header.length, 0);
    prefix.writeUInt32BE(0, 4);
    s.write(Buffer.concat([prefix, header]));
  });
}

t.test('invalid UTF-8 in upload names and commands: 400 naming the field', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  // One database driver: the refusal happens at the HTTP edge, before any store.
  const s = await start('sqlite', runner.client, { CAPSULE_RATE_LIMITS: 'off' });
  t.teardown(s.close);
  const { api } = s;
  const alice = await api.signup();
  const cr = await api.req('POST', '/v1/capsules', { key: alice.key, json: {} });
  t.equal(cr.status, 201, cr.text);
  const id = cr.body.id as string;
  const key = alice.key;

  for (const q of ['a%FF', 'a%FE', '%C3%28', '%ED%A0%80', 'x%F0%9F%98']) {
    const r = await api.req('POST', `/v1/capsules/${id}/upload?filename=${q}`, { key, raw: 'bytes' });
    const e = envelope(t, r, 400, 'invalid_parameters');
    t.equal(e.field, 'filename', `filename=${q} refused naming filename`);
  }
  const ok = await api.req('POST', `/v1/capsules/${id}/upload?filename=caf%C3%A9.txt`, { key, raw: 'bytes' });
  t.equal(ok.status, 200, ok.text);
  t.equal(ok.body.filename, 'café.txt', 'valid percent-encoded UTF-8 is accepted');

  const execRaw = (body: Buffer): Promise<any> =>
    api.req('POST', `/v1/capsules/${id}/exec`, {
      key,
      raw: body,
      headers: { 'content-type': 'application/json' },
    });
  const invalidBytes = Buffer.concat([Buffer.from('{"command":"echo '), Buffer.of(0xff, 0xfe), Buffer.from('"}')]);
  t.equal(envelope(t, await execRaw(invalidBytes), 400, 'invalid_parameters').field, 'command');
  const surrogate = Buffer.from('{"command":"echo \\udcff"}');
  t.equal(envelope(t, await execRaw(surrogate), 400, 'invalid_parameters').field, 'command', 'lone surrogate escape');
  const inEnv = Buffer.concat([Buffer.from('{"command":"true","env":{"A":"'), Buffer.of(0xc3), Buffer.from('"}}')]);
  t.equal(envelope(t, await execRaw(inEnv), 400, 'invalid_parameters').field, 'env.A', 'nested fields are named');

  const ls = await api.req('POST', `/v1/capsules/${id}/exec`, { key, json: { command: 'ls /data/input' } });
  t.equal(ls.status, 200, ls.text);
  t.equal(ls.body.stdout, 'café.txt\n', 'nothing was written under a replaced name');
  const good = await api.req('POST', `/v1/capsules/${id}/exec`, { key, json: { command: 'printf "\\303\\251 é"' } });
  t.equal(good.body.stdout, 'é é', 'valid UTF-8 commands still run');
});

t.test("runner edge: invalid UTF-8 or unpaired surrogates in a frame's text fields are refused by name", async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'u8', memory_mb: 64 });
  const bytes = (...parts: (string | number[])[]): Buffer =>
    Buffer.concat(parts.map((p) => (typeof p === 'string' ? Buffer.from(p) : Buffer.from(p))));
  const exec = await rawFrame(
    r.socketPath,
    bytes('{"id":7,"method":"exec","params":{"capsule_id":"u8","command":"echo ', [0xff], '","timeout_ms":1000}}'),
  );
  t.match(exec, { id: 7, ok: false, error: { code: 'invalid', message: /^command: must be valid UTF-8/ } });
  const up = await rawFrame(
    r.socketPath,
    bytes('{"id":8,"method":"upload","params":{"capsule_id":"u8","filename":"a', [0xfe], '"}}'),
  );
  t.match(up, { id: 8, ok: false, error: { code: 'invalid', message: /^filename: must be valid UTF-8/ } });
  await t.rejects(r.client.upload('u8', 'a\udcff', Buffer.from('x')), {
    code: 'invalid',
    message: /^filename: must be valid UTF-8/,
  });
  await t.rejects(r.client.exec({ capsule_id: 'u8', command: 'echo \ud800', timeout_ms: 1000 }), {
    code: 'invalid',
    message: /^command:/,
  });
  const ls = await r.client.exec({ capsule_id: 'u8', command: 'ls -A /data/input', timeout_ms: 5000 });
  t.equal(ls.stdout, '', 'nothing written');
});
