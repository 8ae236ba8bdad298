// Hostile trees on a real tmpfs: directories nested past PATH_MAX, names of
// invalid UTF-8, a hard-link farm, sparse files of enormous apparent size
// with data past 2^53, and a wipe that meets ENOSPC. The wipe must overwrite
// what exists (each inode once, bounded by the tmpfs), and say precisely what
// it could not.
import t, { type Test } from 'tap';
import { spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { buildEvidence, type DestroyMeasurements } from '../../sandbox-runner/evidence.js';
import { listRegular } from '../../sandbox-runner/files.js';
import { wipeTree } from '../../sandbox-runner/wipe.js';

const MiB = 1024 * 1024;

function tmpfs(t: Test, sizeMb: number): string {
  const root = mkdtempSync(join(tmpdir(), 'wipe-hostile-'));
  t.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m`, 'wipe-hostile', root]).status, 0);
  t.teardown(() => {
    spawnSync('umount', ['-l', root]);
    rmSync(root, { recursive: true, force: true });
  });
  return root;
}

/** Runs python3 (Debian's) with a script; returns stdout, fails the test on error. */
function py(t: Test, script: string, ...args: string[]): string {
  const r = spawnSync('/usr/bin/python3', ['-c', script, ...args], { encoding: 'utf8' });
  t.equal(r.status, 0, `python helper ran: ${r.stderr.slice(-400)}`);
  return r.stdout;
}

// Creates DEPTH directories of 200-byte names (about 60 KB of path, far past PATH_MAX = 4096)
// and a file holding a marker at the bottom, all through dir_fd-relative calls.
const DEEP = String.raw`
import os, sys
root, depth, marker = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode()
fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
for i in range(depth):
    name = ("d%03d" % i) + "x" * 196
    os.mkdir(name, dir_fd=fd)
    nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
f = os.open("deep.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
os.write(f, marker * 1000)
os.close(f)
`;

// Reads the bottom file back the same way; prints its size and whether it is all zeros.
const DEEP_READ = String.raw`
import os, sys
root, depth = sys.argv[1], int(sys.argv[2])
fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
for i in range(depth):
    nfd = os.open(("d%03d" % i) + "x" * 196, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
    os.close(fd)
    fd = nfd
f = os.open("deep.bin", os.O_RDONLY, dir_fd=fd)
b = os.read(f, 1 << 20)
print(len(b), b == bytes(len(b)))
`;

t.test('nested past PATH_MAX, odd-byte names and symlinks: all wiped, nothing followed', async (t) => {
  const root = tmpfs(t, 16);
  const marker = `M${randomBytes(6).toString('hex')}`;
  const depth = 300;
  py(t, DEEP, root, String(depth), marker);
  // Names that are not UTF-8 (0xff 0xfe), with a newline, and a symlink pointing out of the tmpfs.
  py(
    t,
    String.raw`
import os, sys
root = sys.argv[1].encode()
for name in (b"\xff\xfe-odd", b"new\nline", b"\x80"):
    with open(os.path.join(root, name), "wb") as f:
        f.write(b"ODD" * 1000)
os.symlink(b"/etc/hostname", os.path.join(root, b"\xfflink"))
`,
    root,
  );
  const out = wipeTree(root, randomBytes(32));
  t.equal(out.reason, null, 'nothing reported as left');
  t.equal(out.not_overwritten, 0);
  t.same(out.errors, []);
  t.equal(out.report.files, 4, 'the deep file and the three odd-named files');
  t.equal(out.report.bytes_overwritten, marker.length * 1000 + 3 * 3000);
  t.equal(out.report.readback_verified, true);
  t.equal(out.skipped_non_regular, 1, 'the symlink is skipped, not followed');
  t.equal(py(t, DEEP_READ, root, String(depth)).trim(), `${marker.length * 1000} True`, 'deep file reads zeros');
  t.equal(
    py(
      t,
      String.raw`
import os, sys
root = sys.argv[1].encode()
print(all(open(os.path.join(root, n), "rb").read() == bytes(3000) for n in (b"\xff\xfe-odd", b"new\nline", b"\x80")))
`,
      root,
    ).trim(),
    'True',
    'odd-named files read zeros',
  );
});

t.test('hard-link farm: one inode, wiped once; listing hashes it once', async (t) => {
  const root = tmpfs(t, 32);
  py(
    t,
    String.raw`
import os, sys
root = sys.argv[1]
with open(os.path.join(root, "big"), "wb") as f:
    f.write(b"L" * (5 << 20))
for i in range(1000):
    os.link(os.path.join(root, "big"), os.path.join(root, "l%04d" % i))
`,
    root,
  );
  const started = Date.now();
  const listed = listRegular(root, 32 * MiB);
  t.equal(listed.length, 1001);
  t.equal(new Set(listed.map((f) => f.sha512)).size, 1, 'one digest for one inode');
  t.ok(Date.now() - started < 5000, 'listing 1,001 names of a 5 MiB inode is quick (hashed once)');
  const out = wipeTree(root, randomBytes(32));
  t.equal(out.report.files, 1);
  t.equal(out.hard_links_deduplicated, 1000);
  t.equal(out.report.bytes_overwritten, 5 * MiB, 'the bytes that exist, once');
  t.ok(out.report.bytes_overwritten <= out.tmpfs_capacity_bytes);
  t.equal(out.reason, null);
});

t.test('sparse files: only held pages are written, far offsets included, bounded by the tmpfs', async (t) => {
  const root = tmpfs(t, 8);
  const marker = 'SPARSE-MARK-';
  py(
    t,
    String.raw`
import os, sys
root, m = sys.argv[1], sys.argv[2].encode()
f = os.open(os.path.join(root, "huge"), os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 9200000000000000000)
os.pwrite(f, m * 100, 1 << 20)
os.pwrite(f, m * 100, (1 << 62) + 12345)
os.close(f)
f = os.open(os.path.join(root, "holes"), os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 6 << 20)
os.pwrite(f, m, 3 << 20)
os.close(f)
`,
    root,
    marker,
  );
  const listed = listRegular(root, 8 * MiB);
  const huge = listed.find((f) => f.filename === 'huge')!;
  t.equal(huge.sha512, null, 'a file larger than the tmpfs is not read for ever to hash it');
  t.ok(huge.size_bytes > 9e18, 'its apparent size is still reported');
  t.match(
    listed.find((f) => f.filename === 'holes')!.sha512,
    /^sha512:[0-9a-f]{128}$/,
    'a sparse file within bounds is hashed',
  );
  const started = Date.now();
  const out = wipeTree(root, randomBytes(32));
  t.ok(Date.now() - started < 10000, 'a 9.2 EB sparse file does not freeze the wipe');
  t.equal(out.reason, null);
  t.equal(out.report.files, 2);
  t.equal(out.report.readback_verified, true);
  t.ok(out.report.bytes_overwritten >= 2 * marker.length * 100 + marker.length, 'data pages overwritten');
  t.ok(out.report.bytes_overwritten <= 4 * 4096, `only held pages: ${out.report.bytes_overwritten} bytes`);
  t.ok(out.report.bytes_overwritten <= out.tmpfs_used_bytes, 'never more than was in use');
  t.equal(
    py(
      t,
      String.raw`
import os, sys
root = sys.argv[1]
f = os.open(os.path.join(root, "huge"), os.O_RDONLY)
a = os.pread(f, 4096, 1 << 20); b = os.pread(f, 4096, (1 << 62) + 12345)
g = os.open(os.path.join(root, "holes"), os.O_RDONLY)
c = os.pread(g, 4096, 3 << 20)
print(a == bytes(4096) and b == bytes(4096) and c == bytes(4096), os.fstat(f).st_blocks * 512)
`,
      root,
    ).trim(),
    'True 8192',
    'marker pages read zeros and no hole was allocated',
  );
});

t.test('a wipe that meets ENOSPC says so, in the step 3 evidence', async (t) => {
  const root = tmpfs(t, 4);
  // A full tmpfs, and a sparse file whose holes the fallback (no extent helper) would have to allocate.
  py(
    t,
    String.raw`
import os, sys
root = sys.argv[1]
f = os.open(os.path.join(root, "a-sparse"), os.O_RDWR | os.O_CREAT, 0o644)
os.ftruncate(f, 2 << 20)
os.pwrite(f, b"S" * 4096, 1 << 20)
os.close(f)
try:
    with open(os.path.join(root, "fill"), "wb") as g:
        while True:
            g.write(b"F" * 65536)
            g.flush()
except OSError:
    pass
`,
    root,
  );
  const out = wipeTree(root, randomBytes(32), { sparseHelper: false });
  t.equal(out.not_overwritten, 1);
  t.equal(out.reason, '1 entry not overwritten: ENOSPC');
  t.match(out.errors, ['wipe: ENOSPC (1)']);
  t.ok(out.report.bytes_overwritten <= out.tmpfs_capacity_bytes, 'bounded by the tmpfs');

  const m: DestroyMeasurements = {
    capsuleId: 'x',
    host: { kernel: 'k', cgroup_mode: 'v1', swap_active: false, init_on_free: null, bwrap_version: 'b' },
    hostNamespaces: {},
    observations: [],
    execCount: 0,
    tmpfsMountBefore: null,
    wipe: out.report,
    wipeRegions: out.regions,
    wipeSkippedNonRegular: out.skipped_non_regular,
    wipeErrors: out.errors,
    wipeHardLinksDeduplicated: out.hard_links_deduplicated,
    wipeNotOverwritten: out.not_overwritten,
    wipeReason: out.reason,
    tmpfsCapacityBytes: out.tmpfs_capacity_bytes,
    tmpfsUsedBytes: out.tmpfs_used_bytes,
    key: { bytes: 32, zeroized: true, readback_all_zero: true },
    uid: { host_uid: 1, processes_after: 0, zombies_after: 0, processes_scanned: 1, released: true },
    cgroup: { mode: 'v1', empty: true, removed: true },
    tmpfsUnmounted: true,
    tmpfsDetachedLazily: false,
    stateRemoved: true,
    commandWasRunning: false,
    egress: null,
  };
  const ev = buildEvidence(m);
  t.match(ev[2], { performed: false, reason: '1 entry not overwritten: ENOSPC', not_overwritten: 1 });
  t.match(ev[5], { performed: false, reason: '1 entry not overwritten: ENOSPC' });

  // With the extent helper the same tree is wiped completely: no hole is written, so no ENOSPC.
  const again = wipeTree(root, randomBytes(32));
  t.equal(again.reason, null);
  t.equal(again.not_overwritten, 0);
});
