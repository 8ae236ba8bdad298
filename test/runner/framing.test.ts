// Frame codec bounds and a runner that survives garbage on its socket.
import t from 'tap';
import { createHash } from 'node:crypto';
import { createConnection } from 'node:net';
import { encodeFrame, encodeFrameParts, FrameDecoder } from '../../shared/node/framing.js';
import { startRunner } from '../helpers/runner.js';

t.test('a frame in two parts (head, body) is the one-buffer frame, its body never copied', async (t) => {
  const body = Buffer.from('output bytes');
  const parts = encodeFrameParts({ id: 3, ok: true }, body);
  t.equal(parts.length, 2);
  t.equal(parts[1], body, 'the body is written as it is');
  t.same(Buffer.concat(parts), encodeFrame({ id: 3, ok: true }, body));
  t.equal(encodeFrameParts({ id: 4 }, null).length, 1, 'no body: the head alone');
  t.equal(encodeFrameParts({ id: 5 }, Buffer.alloc(0)).length, 1);
  t.throws(() => encodeFrameParts({ id: 6 }, Buffer.alloc(10), { maxHeaderBytes: 64, maxBodyBytes: 5 }));
});

t.test('codec round trip across arbitrary chunking', async (t) => {
  const f1 = encodeFrame({ id: 1, method: 'x' }, Buffer.from([1, 2, 3]));
  const f2 = encodeFrame({ id: 2 }, null);
  const all = Buffer.concat([f1, f2]);
  const d = new FrameDecoder();
  const evs = [];
  for (let i = 0; i < all.length; i++) evs.push(...d.push(all.subarray(i, i + 1)));
  t.equal(evs.length, 2);
  t.same(
    evs.map((e) => (e.kind === 'frame' ? e.frame.header['id'] : null)),
    [1, 2],
  );
  t.same(evs[0]!.kind === 'frame' ? [...evs[0]!.frame.body] : null, [1, 2, 3]);
});

t.test('garbled and oversized frames are reported, never thrown', async (t) => {
  const limits = { maxHeaderBytes: 64, maxBodyBytes: 16 };
  const notJson = Buffer.concat([Buffer.from([0, 0, 0, 3, 0, 0, 0, 0]), Buffer.from('{{{')]);
  const arr = Buffer.concat([Buffer.from([0, 0, 0, 2, 0, 0, 0, 0]), Buffer.from('[]')]);
  const d = new FrameDecoder(limits);
  const evs = d.push(Buffer.concat([notJson, arr, encodeFrame({ id: 9 }, null, limits)]));
  t.same(
    evs.map((e) => e.kind),
    ['error', 'error', 'frame'],
    'bad JSON is skipped, the stream continues',
  );
  const big = encodeFrame({ id: 5 }, Buffer.alloc(100), { maxHeaderBytes: 64, maxBodyBytes: 1000 });
  const ev2 = d.push(Buffer.concat([big, encodeFrame({ id: 6 }, null, limits)]));
  t.equal(ev2[0]!.kind, 'error');
  t.equal(ev2[0]!.kind === 'error' && ev2[0]!.error.kind, 'too_large');
  t.equal(ev2[0]!.kind === 'error' && ev2[0]!.error.header?.['id'], 5, 'oversized body skipped, header kept');
  t.equal(ev2[1]!.kind === 'frame' && ev2[1]!.frame.header['id'], 6);
  const ev3 = d.push(Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]));
  t.equal(ev3[0]!.kind === 'error' && ev3[0]!.error.fatal, true, 'a 4 GiB header is fatal');
  t.same(d.push(encodeFrame({ id: 7 }, null)), [], 'dead decoder refuses input');
  t.throws(() => encodeFrame({ x: 'y'.repeat(100) }, null, limits));
});

t.test('the runner survives garbage and unknown methods', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const raw = createConnection(r.socketPath);
  await new Promise<void>((res) => raw.once('connect', () => res()));
  const got: Buffer[] = [];
  raw.on('data', (b) => got.push(b));
  raw.write(Buffer.concat([Buffer.from([0, 0, 0, 3, 0, 0, 0, 0]), Buffer.from('{{{')]));
  raw.write(encodeFrame({ id: 1, method: 'nope', params: {} }, null));
  raw.write(encodeFrame({ id: 2, method: 'create', params: [] as unknown as Record<string, unknown> }, null));
  raw.write(encodeFrame({ id: 3, method: 'create', params: { capsule_id: 5 } }, null));
  await new Promise((res) => setTimeout(res, 300)); // answers to in-flight requests first
  raw.write(Buffer.from([0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]));
  await new Promise((res) => raw.once('close', res));
  const d = new FrameDecoder();
  const hs = d.push(Buffer.concat(got)).map((e) => (e.kind === 'frame' ? e.frame.header : null));
  t.same(
    hs.map((h) => h?.['ok']),
    [false, false, false, false, false],
  );
  t.same(
    hs.map((h) => (h?.['error'] as { code: string }).code),
    ['invalid', 'invalid', 'invalid', 'invalid', 'invalid'],
  );
  t.notMatch(JSON.stringify(hs), /\n\s+at /, 'no stack traces');
  const hello = await r.client.hello();
  t.equal(hello.protocol_version, 1, 'still serving');
});

t.test('exec answers in the output-in-body form when asked, and in the plain form to older callers', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'forms', memory_mb: 64 });
  const raw = createConnection(r.socketPath);
  t.teardown(() => raw.destroy());
  await new Promise<void>((res) => raw.once('connect', () => res()));
  const d = new FrameDecoder();
  const answer = (id: number, params: Record<string, unknown>) =>
    new Promise<{ header: Record<string, unknown>; body: Buffer }>((resolve) => {
      const onData = (b: Buffer): void => {
        for (const e of d.push(b))
          if (e.kind === 'frame' && e.frame.header['id'] === id) {
            raw.off('data', onData);
            resolve(e.frame);
          }
      };
      raw.on('data', onData);
      raw.write(encodeFrame({ id, method: 'exec', params }, null));
    });
  // 300 KiB of \x01 (1.8 MiB once JSON-escaped) and a line of invalid UTF-8 on stderr.
  const command = "head -c 307200 /dev/zero | tr '\\0' '\\1'; printf 'a\\377b' >&2";
  const plain = await answer(1, { capsule_id: 'forms', command, timeout_ms: 10_000 });
  const res = plain.header['result'] as Record<string, unknown>;
  t.equal(res['stdout'], '\x01'.repeat(307200), 'plain form: streams are JSON strings');
  t.equal(res['stderr'], 'a\ufffdb');
  t.notOk('stdout_bytes' in res);
  t.equal(plain.body.length, 0);

  const inBody = await answer(2, { capsule_id: 'forms', command, timeout_ms: 10_000, output_in_body: true });
  const h = inBody.header['result'] as Record<string, unknown>;
  t.notOk('stdout' in h, 'output-in-body form: no streams in the header');
  t.same([h['stdout_bytes'], h['stderr_bytes']], [307200, 5]);
  t.equal(inBody.body.subarray(0, 307200).toString('utf8'), '\x01'.repeat(307200));
  t.same([...inBody.body.subarray(307200)], [0x61, 0xef, 0xbf, 0xbd, 0x62], 'stderr as the runner decoded it');
  t.ok(h['exit_code'] === 0 && h['stdout_truncated'] === false);

  // The client asks for the body form and gives back the same result as the plain form.
  const viaClient = await r.client.exec({ capsule_id: 'forms', command, timeout_ms: 10_000 });
  t.equal(viaClient.stdout, res['stdout']);
  t.equal(viaClient.stderr, 'a\ufffdb');
  t.notOk('stdout_bytes' in viaClient);

  // Each stream's hash, taken by the runner, is over the UTF-8 of the text as returned (the
  // control plane records it in the trail instead of hashing a megabyte on its loop).
  const sha = (text: string): string => `sha512:${createHash('sha512').update(text, 'utf8').digest('hex')}`;
  t.equal(viaClient.stdout_sha512, sha(viaClient.stdout));
  t.equal(viaClient.stderr_sha512, sha('a\ufffdb'), 'over the decoded text, not the invalid bytes');
  t.equal(res['stderr_sha512'], sha('a\ufffdb'), 'plain form: the same');

  // A stream the plain form had to cut carries no hash (it would not be of what was returned).
  const big = "head -c 1048576 /dev/zero | tr '\\0' '\\1'";
  const cut = (await answer(3, { capsule_id: 'forms', command: big, timeout_ms: 10_000 })).header['result'] as Record<
    string,
    unknown
  >;
  t.equal(cut['stdout_truncated'], true);
  t.notOk('stdout_sha512' in cut);
  t.equal(cut['stderr_sha512'], sha(''));
});

t.test('output is decoded as it arrives, as the whole would decode', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'decode', memory_mb: 64 });
  const run = (command: string) => r.client.exec({ capsule_id: 'decode', command, timeout_ms: 10_000 });
  const sha = (text: string): string => `sha512:${createHash('sha512').update(text, 'utf8').digest('hex')}`;
  // A character split across two writes (two pipe reads) is one character, not two replacements.
  const split = await run("printf 'a\\303'; sleep 0.2; printf '\\251b'");
  t.equal(split.stdout, 'a\u00e9b');
  t.equal(split.stdout_sha512, sha('a\u00e9b'));
  // A byte order mark is output like any other character; an invalid byte reads as U+FFFD.
  const bom = await run("printf '\\357\\273\\277x\\377y'");
  t.equal(bom.stdout, '\ufeffx\ufffdy');
  // A sequence cut by the end of the stream reads as U+FFFD.
  const cut = await run("printf 'z\\342\\202' >&2");
  t.equal(cut.stderr, 'z\ufffd');
  t.equal(cut.stderr_sha512, sha('z\ufffd'));
});
