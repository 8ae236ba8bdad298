// The capsule's private, size-bounded tmpfs on the host.
//
// mount(2)/umount2(2) take microseconds, but spawning util-linux mount/umount
// costs 5-20 ms each (process start plus libmount). Node cannot make those
// syscalls, so one small helper (python3 + ctypes, started once per runner,
// not per capsule) makes them on request; if it cannot run, the runner falls
// back to the util-linux tools. Requests are lines of NUL-separated fields.
import { spawn, spawnSync, type ChildProcessByStdio } from 'node:child_process';
import { stat } from 'node:fs/promises';
import { dirname } from 'node:path';
import type { Readable, Writable } from 'node:stream';

export class TmpfsError extends Error {}

const HELPER = String.raw`
import ctypes, sys
libc = ctypes.CDLL(None, use_errno=True)
MS_NOSUID, MS_NODEV, MS_REMOUNT, MNT_DETACH, EBUSY = 2, 4, 32, 2, 16
for line in sys.stdin:
    f = line.rstrip("\n").split("\0")
    r, err = -1, 22
    if f[0] in ("mount", "remount") and len(f) == 4:
        flags = MS_NOSUID | MS_NODEV | (MS_REMOUNT if f[0] == "remount" else 0)
        r = libc.mount(b"capsule-tmpfs", f[1].encode(), b"tmpfs", flags, ("size=%dm,nr_inodes=%d,mode=0711" % (int(f[2]), int(f[3]))).encode())
        err = ctypes.get_errno()
    elif f[0] == "umount" and len(f) == 2:
        r = libc.umount2(f[1].encode(), 0)
        err = ctypes.get_errno()
        if r != 0 and err == EBUSY:
            r = libc.umount2(f[1].encode(), MNT_DETACH)
            err = ctypes.get_errno()
            if r == 0:
                sys.stdout.write("ok lazy\n")
                sys.stdout.flush()
                continue
    sys.stdout.write("ok\n" if r == 0 else "err %d\n" % err)
    sys.stdout.flush()
`;

/**
 * Whether a filesystem is mounted on dir, from its device against its parent's (as mountpoint(1)
 * does; a capsule tmpfs has a device of its own). Unlike reading mountinfo this never waits for
 * the host's mount lock, which sandboxes starting and ending hold for tens of ms on a busy node.
 */
export async function isMountPoint(dir: string): Promise<boolean> {
  try {
    const [d, parent] = await Promise.all([stat(dir, { bigint: true }), stat(dirname(dir), { bigint: true })]);
    return d.dev !== parent.dev;
  } catch (e) {
    // Gone: nothing is mounted there. Any other failure is no evidence that it left.
    return (e as NodeJS.ErrnoException).code !== 'ENOENT';
  }
}

export class Mounter {
  private helper: ChildProcessByStdio<Writable, Readable, null> | null = null;
  private readonly waiting: ((reply: string | null) => void)[] = [];
  private buf = '';

  /** Starts the helper (best effort). */
  static start(): Mounter {
    const m = new Mounter();
    try {
      const h = spawn('/usr/bin/python3', ['-I', '-S', '-c', HELPER], { stdio: ['pipe', 'pipe', 'ignore'], env: {} });
      h.on('error', () => m.dead());
      h.on('exit', () => m.dead());
      h.stdin.on('error', () => m.dead());
      h.stdout.on('data', (b: Buffer) => {
        m.buf += b.toString('utf8');
        let i;
        while ((i = m.buf.indexOf('\n')) >= 0) {
          const line = m.buf.slice(0, i);
          m.buf = m.buf.slice(i + 1);
          m.waiting.shift()?.(line);
        }
      });
      // Not unref'd: a pending request (e.g. during start-up recovery) must keep the runner alive.
      // The helper ends by itself when the runner goes away (EOF on its stdin).
      m.helper = h;
    } catch {
      m.helper = null;
    }
    return m;
  }

  private dead(): void {
    this.helper = null;
    for (const w of this.waiting.splice(0)) w(null);
  }

  private ask(fields: string[]): Promise<string | null> {
    const h = this.helper;
    if (!h || fields.some((f) => f.includes('\0') || f.includes('\n'))) return Promise.resolve(null);
    return new Promise((resolve) => {
      this.waiting.push(resolve);
      h.stdin.write(`${fields.join('\0')}\n`);
    });
  }

  /** Mounts a tmpfs of sizeMb bytes and at most inodes files/directories (bounds the wipe's walk too). */
  mount(dir: string, sizeMb: number, inodes: number): Promise<void> {
    return this.mountOp('mount', dir, sizeMb, inodes);
  }

  /** Sets the bounds of the tmpfs mounted on dir, keeping its files (fails below what it holds). */
  remount(dir: string, sizeMb: number, inodes: number): Promise<void> {
    return this.mountOp('remount', dir, sizeMb, inodes);
  }

  private async mountOp(op: 'mount' | 'remount', dir: string, sizeMb: number, inodes: number): Promise<void> {
    const reply = await this.ask([op, dir, String(sizeMb), String(inodes)]);
    if (reply === 'ok') return;
    if (reply !== null) throw new TmpfsError(`${op} tmpfs at ${dir} failed: ${reply}`);
    const opts = `${op === 'remount' ? 'remount,' : ''}size=${sizeMb}m,nr_inodes=${inodes},mode=0711,nosuid,nodev`;
    const r = spawnSync('mount', ['-t', 'tmpfs', '-o', opts, 'capsule-tmpfs', dir], { encoding: 'utf8' });
    if (r.status !== 0) throw new TmpfsError(`${op} tmpfs at ${dir} failed: ${(r.stderr || '').trim()}`);
  }

  /**
   * Unmounts dir, lazily (MNT_DETACH) if still busy. gone: it left our mount
   * table; lazy: only detached, so the filesystem lives on while something
   * still holds it open (evidence reports this apart).
   */
  async unmount(dir: string): Promise<{ gone: boolean; lazy: boolean }> {
    const reply = await this.ask(['umount', dir]);
    let lazy = reply === 'ok lazy';
    if (reply === null) {
      const r = spawnSync('umount', [dir], { encoding: 'utf8' });
      if (r.status !== 0 && (await isMountPoint(dir))) lazy = spawnSync('umount', ['-l', dir]).status === 0;
    }
    return { gone: !(await isMountPoint(dir)), lazy };
  }

  /** Ends the helper; resolves once it has exited (at most 2 s), so that its cgroup can be removed. */
  close(): Promise<void> {
    const h = this.helper;
    this.helper = null;
    if (!h || h.exitCode !== null || h.signalCode !== null) return Promise.resolve();
    return new Promise((resolve) => {
      const timer = setTimeout(() => {
        h.kill('SIGKILL');
        resolve();
      }, 2000);
      h.once('exit', () => {
        clearTimeout(timer);
        resolve();
      });
      h.stdin.end();
    });
  }
}
