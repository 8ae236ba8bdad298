#!/usr/bin/env node
// A tiny Linux guest with a pure cgroup v2 hierarchy, booted under qemu (TCG),
// to exercise the runner's cgroup v2 path on hosts that are v1 or hybrid
// (measured in docs/PERFORMANCE.md, "cgroup v2 guest").
//
//   node scripts/cgroup-v2-guest.mjs build
//       Builds the guest assets once into the cache and prints their paths (JSON).
//   node scripts/cgroup-v2-guest.mjs run --share DIR [--ro PATH]... [--timeout-s N]
//       Boots the guest: DIR is shared read-write at /share and must hold run.sh
//       (the guest runs `/bin/sh /share/run.sh`); the host's /usr and each
//       --ro PATH are shared read-only at the same paths, and the host's /etc
//       (world-readable files) is copied in. The console goes to stdout; the
//       exit status is run.sh's, reported over the serial console, or 3 when
//       the guest never reported one (did not boot, crashed, timed out).
//
// Assets (kernel and busybox initramfs, never committed) live in
// $CAPSULE_GUEST_CACHE (default /var/cache/capsule/cgroup-v2-guest). The
// kernel comes from Debian's current linux-image-*-amd64 (apt-get download +
// dpkg-deb, not installed); $CAPSULE_GUEST_KERNEL_PKG pins another one.
// Needs the Debian packages qemu-system-x86 and busybox-static (./run installs them).
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';

const CACHE = process.env.CAPSULE_GUEST_CACHE || '/var/cache/capsule/cgroup-v2-guest';
const BUSYBOX = '/bin/busybox';
const QEMU = 'qemu-system-x86_64';
/** Modules the guest needs for virtio 9p (everything else it uses is built in); dependencies follow. */
const WANTED_MODULES = ['virtio_pci', '9pnet_virtio', '9p'];
/** Printed by the guest's init on the serial console; the host parses it. */
const STATUS_MARK = 'CAPSULE_GUEST_EXIT=';
const FAIL_MARK = 'CAPSULE_GUEST_FAIL:';
const MOUNT_OPTS = 'trans=virtio,version=9p2000.L,msize=262144';

// Stage 1 copies the initramfs to a tmpfs and switch_roots into it: bubblewrap's
// pivot_root fails (EINVAL) on the initramfs rootfs. Stage 2 mounts the shares
// and a cgroup2-only hierarchy the way systemd does, runs /share/run.sh and
// reports its status. Busybox sits in /.bb so /bin can be the merged-/usr link.
const INIT = `#!/.bb/busybox sh
B=/.bb/busybox
fail() { echo "${FAIL_MARK} $*"; $B sync; $B poweroff -f; }
if [ "$1" != stage2 ]; then
  $B mkdir /newroot && $B mount -t tmpfs -o mode=0755 rootfs /newroot || fail tmpfs root
  for e in /.bb /init /modules /bin /sbin /lib /lib64 /proc /sys /dev /tmp /usr /etc /share /run /root /var; do
    $B cp -a "$e" /newroot/ || fail copy $e
  done
  exec $B switch_root /newroot /init stage2
fi
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
$B mount -t proc proc /proc || fail mount proc
$B mount -t sysfs sysfs /sys || fail mount sysfs
$B mount -t devtmpfs devtmpfs /dev || fail mount devtmpfs
$B mkdir -p /dev/pts /dev/shm
$B mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
$B mount -t tmpfs -o mode=1777 tmpfs /dev/shm
for m in /modules/*.ko; do $B insmod "$m" || fail insmod $m; done
$B mount -t 9p -o ${MOUNT_OPTS},ro,cache=loose usr /usr || fail mount /usr
$B mount -t 9p -o ${MOUNT_OPTS} share /share || fail mount /share
if [ -f /share/.mounts ]; then
  while read -r tag path; do
    $B mkdir -p "$path" && $B mount -t 9p -o ${MOUNT_OPTS},ro,cache=loose "$tag" "$path" || fail mount $path
  done < /share/.mounts
fi
$B mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup || fail mount cgroup2
echo "+cpu +memory +pids" > /sys/fs/cgroup/cgroup.subtree_control || fail enable controllers
$B ip link set lo up
$B hostname cgroup-v2-guest
cd /
/bin/sh /share/run.sh
echo "${STATUS_MARK}$?"
$B sync
$B poweroff -f
`;

function die(msg) {
  process.stderr.write(`cgroup-v2-guest: ${msg}\n`);
  process.exit(3);
}

function sh(cmd, args, opts = {}) {
  const r = spawnSync(cmd, args, { encoding: 'utf8', maxBuffer: 64 << 20, ...opts });
  if (r.error) die(`${cmd}: ${r.error.message}`);
  if (r.status !== 0) die(`${cmd} ${args.join(' ')} failed (${r.status}): ${(r.stderr || '').trim()}`);
  return r.stdout;
}

function need(cmd, pkg) {
  if (spawnSync('sh', ['-c', `command -v ${cmd}`]).status !== 0)
    die(`${cmd} not found; install the Debian package ${pkg} (./run installs it)`);
}

/** The kernel package: pinned, else one already cached, else Debian's current one. */
function kernelPackage() {
  if (process.env.CAPSULE_GUEST_KERNEL_PKG) return process.env.CAPSULE_GUEST_KERNEL_PKG;
  const cached = existsSync(CACHE)
    ? readdirSync(CACHE)
        .filter((d) => d.startsWith('kernel-') && existsSync(join(CACHE, d, 'vmlinux')))
        .map((d) => d.slice('kernel-'.length))
        .sort((a, b) => a.localeCompare(b, 'en', { numeric: true }))
    : [];
  if (cached.length > 0) return cached.at(-1);
  const deps = sh('apt-cache', ['depends', 'linux-image-amd64']);
  const m = /Depends: (linux-image-[0-9][^\s]*-amd64)\b/.exec(deps);
  if (!m) die('cannot resolve linux-image-amd64 to a kernel package (apt-get update?)');
  return m[1];
}

/** Moves a finished temp dir into place; a concurrent builder may have won (then ours is dropped). */
function publish(tmp, dest) {
  try {
    renameSync(tmp, dest);
  } catch {
    rmSync(tmp, { recursive: true, force: true });
    if (!existsSync(dest)) die(`cannot publish ${dest}`);
  }
}

/** module name -> names it depends on, read from the .modinfo strings of the .ko. */
function moduleDeps(ko) {
  const m = /depends=([^\0]*)\0/.exec(readFileSync(ko, 'latin1'));
  return m && m[1] ? m[1].split(',') : [];
}

function buildKernel(pkg) {
  const dest = join(CACHE, `kernel-${pkg}`);
  if (existsSync(join(dest, 'vmlinux'))) return dest;
  mkdirSync(CACHE, { recursive: true });
  const tmp = mkdtempSync(join(CACHE, '.build-'));
  const dl = join(tmp, 'dl');
  mkdirSync(dl);
  chmodSync(dl, 0o777); // apt's _apt user writes the download
  let r = spawnSync('apt-get', ['download', '-q', pkg], { cwd: dl, encoding: 'utf8' });
  if (r.status !== 0) {
    sh('apt-get', ['update', '-qq']);
    r = spawnSync('apt-get', ['download', '-q', pkg], { cwd: dl, encoding: 'utf8' });
    if (r.status !== 0) die(`apt-get download ${pkg} failed: ${r.stderr.trim()}`);
  }
  const deb = readdirSync(dl).find((f) => f.endsWith('.deb'));
  if (!deb) die(`apt-get download ${pkg} left no .deb`);
  const x = join(tmp, 'x');
  mkdirSync(x);
  sh('dpkg-deb', ['-x', join(dl, deb), x]);
  const vmlinuz = readdirSync(join(x, 'boot')).find((f) => f.startsWith('vmlinuz-'));
  if (!vmlinuz) die(`${pkg} has no boot/vmlinuz-*`);
  // The self-unpacking bzImage takes ~13 s under TCG; its xz payload (an ELF
  // with a PVH entry) boots directly with -kernel in ~2 s.
  sh('/usr/bin/python3', [
    '-c',
    `import lzma, sys
data = open(sys.argv[1], 'rb').read()
i = data.find(b'\\xfd7zXZ\\x00')
if i < 0: sys.exit('no xz payload in ' + sys.argv[1])
d = lzma.LZMADecompressor(lzma.FORMAT_XZ)
open(sys.argv[2], 'wb').write(d.decompress(data[i:]))
if not d.eof: sys.exit('truncated xz payload')`,
    join(x, 'boot', vmlinuz),
    join(tmp, 'vmlinux'),
  ]);
  const kver = vmlinuz.slice('vmlinuz-'.length);
  const byName = new Map();
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith('.ko')) byName.set(e.name.slice(0, -3).replace(/-/g, '_'), join(d, e.name));
    }
  };
  walk(join(x, 'lib', 'modules', kver, 'kernel'));
  // Load order: every module after its dependencies.
  const order = [];
  const visit = (name) => {
    const n = name.replace(/-/g, '_');
    if (order.includes(n)) return;
    const ko = byName.get(n);
    if (!ko) die(`module ${n} not in ${pkg} (built in? then drop it from WANTED_MODULES)`);
    for (const d of moduleDeps(ko)) visit(d);
    order.push(n);
  };
  for (const w of WANTED_MODULES) visit(w);
  mkdirSync(join(tmp, 'modules'));
  order.forEach((n, i) => copyFileSync(byName.get(n), join(tmp, 'modules', `${String(i).padStart(2, '0')}-${n}.ko`)));
  writeFileSync(join(tmp, 'release'), `${kver}\n`);
  rmSync(dl, { recursive: true, force: true });
  rmSync(x, { recursive: true, force: true });
  publish(tmp, dest);
  return dest;
}

/** The initramfs: static busybox, the init above, the 9p modules. Keyed by its inputs. */
function buildInitrd(kernelDir) {
  const key = createHash('sha256')
    .update(INIT)
    .update(readFileSync(BUSYBOX))
    .update(readdirSync(join(kernelDir, 'modules')).join(','))
    .digest('hex')
    .slice(0, 16);
  const dest = join(kernelDir, `initrd-${key}`);
  if (existsSync(join(dest, 'initrd.cpio'))) return join(dest, 'initrd.cpio');
  const tmp = mkdtempSync(join(CACHE, '.build-'));
  const root = join(tmp, 'root');
  for (const d of ['.bb', 'modules', 'proc', 'sys', 'dev', 'tmp', 'usr', 'etc', 'share', 'run', 'root', 'var/tmp'])
    mkdirSync(join(root, d), { recursive: true });
  chmodSync(join(root, 'tmp'), 0o1777);
  chmodSync(join(root, 'var/tmp'), 0o1777);
  // Debian's merged /usr: the runner binds these links into every capsule as they are.
  for (const l of ['bin', 'sbin', 'lib', 'lib64']) symlinkSync(`usr/${l}`, join(root, l));
  copyFileSync(BUSYBOX, join(root, '.bb', 'busybox'));
  chmodSync(join(root, '.bb', 'busybox'), 0o755);
  writeFileSync(join(root, 'init'), INIT, { mode: 0o755 });
  for (const m of readdirSync(join(kernelDir, 'modules')))
    copyFileSync(join(kernelDir, 'modules', m), join(root, 'modules', m));
  // Uncompressed: unpacking gzip costs more under TCG than reading the bytes.
  const list = sh('find', ['.', '-mindepth', '1'], { cwd: root });
  const cpio = spawnSync(BUSYBOX, ['cpio', '-o', '-H', 'newc'], { cwd: root, input: list, maxBuffer: 256 << 20 });
  if (cpio.status !== 0) die(`busybox cpio failed: ${cpio.stderr.toString().trim()}`);
  writeFileSync(join(tmp, 'initrd.cpio'), cpio.stdout);
  rmSync(root, { recursive: true, force: true });
  publish(tmp, dest);
  return join(dest, 'initrd.cpio');
}

/** Whether an ELF executable names a program interpreter (is dynamically linked). */
function dynamic(file) {
  const b = readFileSync(file);
  const phoff = Number(b.readBigUInt64LE(0x20));
  const size = b.readUInt16LE(0x36);
  for (let i = 0; i < b.readUInt16LE(0x38); i++) if (b.readUInt32LE(phoff + i * size) === 3) return true; // PT_INTERP
  return false;
}

function build() {
  need(QEMU, 'qemu-system-x86');
  // The initramfs has no libc: its busybox must be the static one.
  if (!existsSync(BUSYBOX) || dynamic(BUSYBOX))
    die(`no static ${BUSYBOX}; install the Debian package busybox-static (./run installs it)`);
  const pkg = kernelPackage();
  const kernelDir = buildKernel(pkg);
  return {
    kernel_package: pkg,
    kernel_release: readFileSync(join(kernelDir, 'release'), 'utf8').trim(),
    vmlinux: join(kernelDir, 'vmlinux'),
    initrd: buildInitrd(kernelDir),
  };
}

/**
 * The host's /etc as a second initramfs archive, built per boot (the kernel
 * unpacks concatenated archives in order). Only world-readable files: no
 * shadow, no private keys. Reading it over 9p instead cost ~20 s of stat and
 * readlink round trips at runner start (it copies /etc/ssl and alternatives).
 */
function etcArchive() {
  const list = [];
  const walk = (d) => {
    list.push(d);
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.isSymbolicLink() || (e.isFile() && (statSync(p).mode & 0o004) !== 0)) list.push(p);
    }
  };
  walk('/etc');
  const cpio = spawnSync(BUSYBOX, ['cpio', '-o', '-H', 'newc'], {
    cwd: '/',
    input: list.map((p) => p.slice(1)).join('\n'),
    maxBuffer: 256 << 20,
  });
  if (cpio.status !== 0) die(`busybox cpio (etc) failed: ${cpio.stderr.toString().trim()}`);
  return cpio.stdout;
}

function virtfs(path, tag, readonly) {
  return ['-virtfs', `local,path=${path},mount_tag=${tag},security_model=none${readonly ? ',readonly=on' : ''}`];
}

function run(argv) {
  let share = null;
  let timeoutS = 300;
  const ro = [];
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--share') share = argv[++i];
    else if (a === '--ro') ro.push(argv[++i]);
    else if (a === '--timeout-s') timeoutS = Number(argv[++i]);
    else die(`unknown argument ${a}`);
  }
  if (!share || !existsSync(join(share, 'run.sh'))) die('--share DIR with a run.sh is required');
  const assets = build();
  // Tags, not paths, cross the kernel command line (it splits on spaces).
  writeFileSync(join(share, '.mounts'), ro.map((p, i) => `ro${i} ${p}\n`).join(''));
  const initrd = join(share, '.initrd.cpio');
  writeFileSync(initrd, Buffer.concat([readFileSync(assets.initrd), etcArchive()]), { mode: 0o600 });
  const args = [
    '-accel',
    'tcg',
    '-cpu',
    'max',
    '-m',
    '1024',
    '-smp',
    '1',
    '-display',
    'none',
    '-serial',
    'stdio',
    '-monitor',
    'none',
    '-no-reboot',
    '-net',
    'none',
    '-kernel',
    assets.vmlinux,
    '-initrd',
    initrd,
    '-append',
    'console=ttyS0 panic=-1 quiet',
    ...virtfs('/usr', 'usr', true),
    ...virtfs(share, 'share', false),
    ...ro.flatMap((p, i) => virtfs(p, `ro${i}`, true)),
  ];
  const q = spawn(QEMU, args, { stdio: ['ignore', 'pipe', 'inherit'] });
  let tail = '';
  q.stdout.on('data', (b) => {
    process.stdout.write(b);
    tail = (tail + b.toString('latin1')).slice(-4096);
  });
  const timer = setTimeout(() => {
    process.stderr.write(`cgroup-v2-guest: no power-off within ${timeoutS} s, killing qemu\n`);
    q.kill('SIGKILL');
  }, timeoutS * 1000);
  q.on('close', (code) => {
    clearTimeout(timer);
    const fail = new RegExp(`${FAIL_MARK} (.*)`).exec(tail);
    if (fail) die(`guest init failed: ${fail[1].trim()}`);
    const m = new RegExp(`${STATUS_MARK}(\\d+)`).exec(tail);
    if (!m) die(`the guest reported no exit status (qemu exit ${code})`);
    process.exit(Number(m[1]));
  });
}

const [cmd, ...rest] = process.argv.slice(2);
if (cmd === 'build') process.stdout.write(`${JSON.stringify(build(), null, 2)}\n`);
else if (cmd === 'run') run(rest);
else die('usage: cgroup-v2-guest.mjs build | run --share DIR [--ro PATH]... [--timeout-s N]');
