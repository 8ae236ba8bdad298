// Wipe of sparse files: only the pages a file really holds are overwritten.
// Node has no lseek(2), so SEEK_DATA/SEEK_HOLE (supported by tmpfs) and
// pwrite at offsets beyond 2^53 are done by a short python3 helper, one run
// per batch of files (spawnSync: called from a worker thread or at start-up
// recovery, never on the serving event loop). The helper opens each file
// through /proc/<runner pid>/fd/<fd> (the runner's own open, already checked
// O_NOFOLLOW and regular), re-checks the inode, and per 1 MiB region of each
// data extent writes zeros, ones, random (os.urandom), reads back, writes
// zeros and reads back, like wipe.ts does for dense files. It never writes a
// hole, so a sparse file cannot make the wipe allocate (ENOSPC) and the bytes
// it reports are bytes that existed.
import { spawnSync } from 'node:child_process';

const HELPER = String.raw`
import errno, hashlib, os, stat, sys
pid, budget = sys.argv[1], int(sys.argv[2])
R = 1 << 20
Z = memoryview(bytes(R))
O = memoryview(b"\xff" * R)
def code(e):
    return errno.errorcode.get(e.errno, "EIO")
def wr(fd, buf, pos):
    off = 0
    while off < len(buf):
        off += os.pwrite(fd, buf[off:], pos + off)
def rd(fd, n, pos):
    out = b""
    while len(out) < n:
        b = os.pread(fd, n - len(out), pos + len(out))
        if not b:
            break
        out += b
    return out
for line in sys.stdin:
    n, ino = line.split()
    try:
        fd = os.open("/proc/%s/fd/%s" % (pid, n), os.O_RDWR | os.O_NONBLOCK)
    except OSError as e:
        print("err open " + code(e), flush=True)
        continue
    try:
        st = os.fstat(fd)
        if st.st_ino != int(ino) or not stat.S_ISREG(st.st_mode):
            print("err open ESTALE", flush=True)
            continue
        size, pos, total, ok, regions = st.st_size, 0, 0, 1, []
        while pos < size:
            try:
                s = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError as e:
                if e.errno == errno.ENXIO:
                    break
                raise
            end = min(os.lseek(fd, s, os.SEEK_HOLE), size)
            while s < end:
                n = min(R, end - s)
                if total + n > budget:
                    raise OSError(errno.EFBIG, "more data than the tmpfs holds")
                wr(fd, Z[:n], s)
                wr(fd, O[:n], s)
                rnd = os.urandom(n)
                wr(fd, rnd, s)
                if rd(fd, n, s) != rnd:
                    ok = 0
                wr(fd, Z[:n], s)
                back = rd(fd, n, s)
                if back == Z[:n]:
                    regions.append("z%d" % n)
                else:
                    ok = 0
                    regions.append("h%d:%s" % (n, hashlib.sha512(b"\0" + back).hexdigest()))
                total += n
                s += n
            pos = end
        budget -= total
        print("ok %d %d %s" % (ok, total, " ".join(regions)), flush=True)
    except OSError as e:
        print("err wipe " + code(e), flush=True)
    finally:
        os.close(fd)
`;

/** One wiped region: its length, and the leaf hash of a read-back that was not all zeros. */
export interface SparseRegion {
  len: number;
  leafHex: string | null;
}

export type SparseResult =
  { ok: true; verified: boolean; bytes: number; regions: SparseRegion[] } | { ok: false; what: string; code: string };

/**
 * Wipes the data extents of the files open as fds (inode numbers alongside),
 * writing at most budget bytes in all. null: the helper could not run.
 */
export function wipeSparse(files: { fd: number; ino: number }[], budget: number): SparseResult[] | null {
  if (files.length === 0) return [];
  const r = spawnSync('/usr/bin/python3', ['-I', '-S', '-c', HELPER, String(process.pid), String(budget)], {
    input: files.map((f) => `${f.fd} ${f.ino}\n`).join(''),
    encoding: 'utf8',
    env: {},
    maxBuffer: 64 * 1024 * 1024,
  });
  if (r.error || typeof r.stdout !== 'string') return null;
  const lines = r.stdout.split('\n');
  return files.map((_, i): SparseResult => {
    const line = lines[i] ?? '';
    // A helper that died part way: the files it did not answer for are reported, not assumed wiped.
    if (!line.startsWith('ok ') && !line.startsWith('err ')) return { ok: false, what: 'wipe', code: 'EHELPER' };
    const parts = line.split(' ');
    if (parts[0] === 'err') return { ok: false, what: parts[1] ?? 'wipe', code: parts[2] ?? 'EIO' };
    const regions = parts
      .slice(3)
      .filter((p) => p.length > 0)
      .map((p): SparseRegion => {
        if (p.startsWith('z')) return { len: Number(p.slice(1)), leafHex: null };
        const [len, hex] = p.slice(1).split(':');
        return { len: Number(len), leafHex: hex ?? '' };
      });
    return { ok: true, verified: parts[1] === '1', bytes: Number(parts[2]), regions };
  });
}
