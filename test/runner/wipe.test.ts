// The wipe really overwrites the bytes: checked through file descriptors held
// open across the wipe (so the very pages the capsule used are read back).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  closeSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readSync,
  rmSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { wipeTree } from '../../sandbox-runner/wipe.js';
import { startRunner } from '../helpers/runner.js';

const MiB = 1024 * 1024;

function readAll(fd: number, size: number): Buffer {
  const b = Buffer.alloc(size);
  let pos = 0;
  while (pos < size) {
    const n = readSync(fd, b, pos, size - pos, pos);
    if (n === 0) break;
    pos += n;
  }
  return b;
}

/** Independent RFC 6962 / SHA-512 root (docs/PROOF_FORMAT.md "Activity root") over the given leaf data. */
function mth(leaves: Buffer[]): Buffer {
  const h = (...p: Buffer[]): Buffer => p.reduce((x, b) => x.update(b), createHash('sha512')).digest();
  if (leaves.length === 0) return h();
  if (leaves.length === 1) return h(Buffer.of(0), leaves[0]!);
  let k = 1;
  while (k * 2 < leaves.length) k *= 2;
  return h(Buffer.of(1), mth(leaves.slice(0, k)), mth(leaves.slice(k)));
}

t.test('wipeTree overwrites every byte of a real tmpfs and never follows links', async (t) => {
  const root = mkdtempSync(join(tmpdir(), 'wipe-test-'));
  t.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=32m', 'wipe-test', root]).status, 0);
  const host = mkdtempSync(join(tmpdir(), 'wipe-host-'));
  t.teardown(() => {
    spawnSync('umount', ['-l', root]);
    rmSync(root, { recursive: true, force: true });
    rmSync(host, { recursive: true, force: true });
  });
  writeFileSync(join(host, 'target'), 'HOST-BYTES');
  const marker = Buffer.from(`MARK-${randomBytes(8).toString('hex')}-`);
  const sizes: [string, number][] = [
    ['a/empty', 0],
    ['a/one', 1],
    ['b/c/mid', MiB + 3],
    ['big', 3 * MiB],
  ];
  mkdirSync(join(root, 'a'));
  mkdirSync(join(root, 'b/c'), { recursive: true });
  const fds: [number, number][] = [];
  for (const [p, size] of sizes) {
    const data = Buffer.alloc(size);
    for (let i = 0; i < size; i += marker.length) marker.copy(data, i);
    writeFileSync(join(root, p), data);
    fds.push([openSync(join(root, p), 'r'), size]);
  }
  symlinkSync(join(host, 'target'), join(root, 'link'));
  spawnSync('mkfifo', [join(root, 'fifo')]);

  const key = randomBytes(32);
  const out = wipeTree(root, key);
  t.equal(out.report.bytes_overwritten, 1 + MiB + 3 + 3 * MiB);
  t.equal(out.report.files, 4);
  t.equal(out.report.readback_verified, true);
  t.same(out.errors, []);
  t.equal(out.skipped_non_regular, 2, 'symlink and FIFO skipped');
  // leaves in path order: a/empty (none), a/one (1), b/c/mid (1 MiB, 3), big (3 x 1 MiB)
  const expected = mth([
    Buffer.alloc(1),
    Buffer.alloc(MiB),
    Buffer.alloc(3),
    Buffer.alloc(MiB),
    Buffer.alloc(MiB),
    Buffer.alloc(MiB),
  ]);
  t.equal(out.report.zero_state_root, `sha512:${expected.toString('hex')}`, 'root recomputed independently');
  for (const [fd, size] of fds) {
    const bytes = readAll(fd, size);
    t.ok(
      bytes.every((b) => b === 0),
      `all ${size} bytes read back zero through the held fd`,
    );
    t.equal(bytes.indexOf(marker.subarray(0, 8)), -1);
    closeSync(fd);
  }
  t.equal(readFileSync(join(host, 'target'), 'utf8'), 'HOST-BYTES', 'symlink target untouched');
});

t.test('destroy leaves no marker in the pages the capsule used', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;
  await c.create({ capsule_id: 'wipe', memory_mb: 128 });
  const marker = `SECRET${randomBytes(10).toString('hex')}`;
  const res = await c.exec({
    capsule_id: 'wipe',
    command: `yes ${marker} | head -c 4194304 > /data/output/m.txt; cp /data/output/m.txt /tmp/copy; echo ${marker} > /data/input/note`,
    timeout_ms: 20000,
  });
  t.equal(res.exit_code, 0);
  const dir = `${r.stateDir}/capsules/wipe`;
  const held = ['output/m.txt', 'tmp/copy', 'input/note'].map((p) => openSync(join(dir, p), 'r'));
  const before = readAll(held[0]!, 4 * MiB);
  t.ok(before.includes(marker), 'marker present before destroy');
  const d = await c.destroy('wipe');
  t.equal(d.wipe.readback_verified, true);
  t.ok(d.wipe.bytes_overwritten >= 8 * MiB);
  t.equal((d.evidence[7] as Record<string, unknown>)['tmpfs_unmounted'], true, 'unmounted (lazily: we held fds)');
  t.equal(
    (d.evidence[7] as Record<string, unknown>)['tmpfs_detached_lazily'],
    true,
    'evidence says the unmount was only a lazy detach',
  );
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8');
  t.notOk(mounts.includes(dir), 'gone from the mount table');
  for (const fd of held) {
    const after = readAll(fd, 4 * MiB);
    t.equal(after.indexOf(marker), -1, 'marker not found in the wiped pages');
    t.ok(
      after.every((b) => b === 0),
      'pages hold zeros',
    );
    closeSync(fd);
  }
});
