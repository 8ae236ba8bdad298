// File transfer rules: FIFOs, devices and symlinks are never followed or
// read; sizes are bounded; a refused write leaves nothing behind.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { startRunner } from '../helpers/runner.js';

t.test('special files and bounds', async (t) => {
  const r = await startRunner({ options: { max_upload_bytes: '4096', max_read_bytes: '4096', tmpfs_mb: '8' } });
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'files', memory_mb: 64 });
  const dir = `${r.stateDir}/capsules/files`;

  // Planted from the host side as root (mknod is refused inside the capsule).
  t.equal(spawnSync('mkfifo', [`${dir}/output/pipe`]).status, 0);
  t.equal(spawnSync('mknod', [`${dir}/output/null`, 'c', '1', '3']).status, 0);
  t.equal(spawnSync('mkfifo', [`${dir}/input/inpipe`]).status, 0);
  t.equal(spawnSync('mkdir', [`${dir}/output/sub`]).status, 0);
  await c.exec({
    capsule_id: 'files',
    command: 'head -c 5000 /dev/zero > /data/output/big.bin; echo ok > /data/output/ok.txt',
    timeout_ms: 5000,
  });

  await t.rejects(
    c.readOutput('files', 'pipe'),
    { code: 'invalid', message: /not a regular file/ },
    'FIFO is not read (and does not hang)',
  );
  await t.rejects(c.readOutput('files', 'null'), { code: 'invalid' }, 'device is not read');
  await t.rejects(c.readOutput('files', 'sub'), { code: 'invalid' }, 'directory is not read');
  await t.rejects(c.readOutput('files', 'big.bin'), { code: 'too_large', message: /filename/ });
  const list = await c.listOutput('files');
  t.same(
    list.map((f) => f.filename),
    ['big.bin', 'ok.txt'],
    'only regular files are listed',
  );
  t.equal(list[0]!.size_bytes, 5000);

  await t.rejects(
    c.upload('files', 'inpipe', Buffer.from('x')),
    { code: 'invalid' },
    'upload onto a FIFO is refused without blocking',
  );
  await t.rejects(c.upload('files', 'huge.bin', Buffer.alloc(5000)), { code: 'too_large' });
  t.notOk(existsSync(`${dir}/input/huge.bin`), 'nothing half-written');
  await t.rejects(
    c.exec({
      capsule_id: 'files',
      command: 'true',
      input_b64: Buffer.alloc(600 * 1024).toString('base64'),
      timeout_ms: 1000,
    }),
    { code: 'too_large', message: /input_b64/ },
  );
  await t.rejects(c.exec({ capsule_id: 'files', command: 'true', input_b64: 'not base64!', timeout_ms: 1000 }), {
    code: 'invalid',
    message: /input_b64/,
  });
  await t.rejects(c.exec({ capsule_id: 'files', command: 'x'.repeat(11 * 1024), timeout_ms: 1000 }), {
    code: 'too_large',
    message: /command/,
  });
  await t.rejects(c.exec({ capsule_id: 'files', command: 'true', env: { 'BAD-NAME': 'x' }, timeout_ms: 1000 }), {
    code: 'invalid',
    message: /env/,
  });

  const up = await c.upload('files', 'fine.txt', Buffer.from('fine'));
  t.equal(up.size_bytes, 4);
  const seen = await c.exec({
    capsule_id: 'files',
    command: 'stat -c "%u %a" /data/input/fine.txt; cat /data/input/fine.txt',
    timeout_ms: 5000,
  });
  t.equal(seen.stdout, '1000 644\nfine', 'owned by the capsule user inside');

  const d = await c.destroy('files');
  t.equal(d.wipe.readback_verified, true);
  t.ok(
    (d.evidence[2] as { non_regular_skipped: number }).non_regular_skipped >= 3,
    'FIFOs and device skipped by the wipe',
  );
});

t.test('app files are mounted read-only at /capsule/app', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({
    capsule_id: 'app',
    memory_mb: 64,
    app_files: [{ filename: 'main.py', content_b64: Buffer.from('print("from app")').toString('base64') }],
  });
  const res = await c.exec({
    capsule_id: 'app',
    command: 'python3 /capsule/app/main.py; echo x > /capsule/app/main.py 2>/dev/null || echo readonly',
    timeout_ms: 10000,
  });
  t.equal(res.stdout, 'from app\nreadonly\n');
  await t.rejects(c.create({ capsule_id: 'app2', memory_mb: 64, app_files: [{ filename: '../x', content_b64: '' }] }), {
    code: 'invalid',
    message: /app_files\[0\]\.filename/,
  });
  t.same(await c.list(), ['app'], 'a refused create leaves nothing');
});
