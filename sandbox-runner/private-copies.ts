// Each tenant's capsules map their own copies of the files nearly every
// process maps: the dynamic loader, libc and the shell. The kernel links and
// unlinks a process's file mappings at fork, exec and exit under each file's
// own lock (i_mmap_rwsem), so with one copy on the node (the image is the
// host's /usr) a fork bomb in one capsule held every process start on the node
// behind it, the runner's own among them (measured under the soak: the
// runner's spawner waited 511 ms in one fork; a capsule's `sh` up to 549 ms).
// A copy per tenant keeps that lock among the tenant's own processes. The
// copies live on the runner's small tmpfs (charged to the runner, named at
// random: a capsule's mountinfo shows `/.own/<random>/libc.so.6`), and every
// sandbox binds them read-only over the image's files (sandbox.ts).

import { lstatSync } from 'node:fs';
import { chmod, copyFile, mkdir, rm } from 'node:fs/promises';
import { basename, join } from 'node:path';
import type { Random } from './clock.js';

/** Where a usrmerged image keeps the files every process maps (one architecture's exist). */
export const PRIVATE_FILES = [
  // The dynamic loader and libc: mapped by every dynamically linked program.
  '/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2',
  '/usr/lib/x86_64-linux-gnu/libc.so.6',
  '/usr/lib/aarch64-linux-gnu/ld-linux-aarch64.so.1',
  '/usr/lib/aarch64-linux-gnu/libc.so.6',
  // /bin/sh: every exec's wrapper, every command line and most scripts (and the classic fork bomb).
  '/usr/bin/dash',
];

/** A bind of the sandbox: a private copy (host path) over the image's file (path inside). */
export type PrivateBind = readonly [copy: string, target: string];

/** One capsule's hold on its tenant's copies. */
export interface CopyLease {
  /** None when the copies cannot be made (the tmpfs is full): the capsule maps the image's own files. */
  binds: Promise<readonly PrivateBind[]>;
  /** The capsule is gone; the tenant's last lease removes the copies (sandboxes still bound keep theirs). */
  release(): void;
}

interface Held {
  users: number;
  dir: string;
  /** The image files' identity when copied: a changed file (a libc security update) gets a new copy. */
  stamp: string;
  binds: Promise<readonly PrivateBind[]>;
}

export class PrivateCopies {
  private readonly held = new Map<string, Held>();

  private constructor(
    private readonly root: string,
    private readonly random: Random,
  ) {}

  /** `root`: a directory on the runner's small tmpfs; what a previous runner left there is removed. */
  static async open(root: string, random: Random): Promise<PrivateCopies> {
    await rm(root, { recursive: true, force: true });
    await mkdir(root, { mode: 0o711 });
    return new PrivateCopies(root, random);
  }

  /** A capsule of `tenant` on `imageRoot` holds the tenant's copies, made on its first capsule. */
  acquire(tenant: string, imageRoot: string): CopyLease {
    const key = `${tenant}\0${imageRoot}`;
    const files = imageFiles(imageRoot);
    const stamp = files.map((f) => f.id).join(',');
    let h = this.held.get(key);
    if (!h || h.stamp !== stamp) {
      // A replaced set stays on disk for the capsules that hold it, and goes with their last lease.
      const dir = join(this.root, this.random.bytes(8).toString('hex'));
      h = { users: 0, dir, stamp, binds: copyInto(dir, imageRoot, files) };
      this.held.set(key, h);
    }
    const held = h;
    held.users++;
    let released = false;
    return {
      binds: held.binds,
      release: () => {
        if (released) return;
        released = true;
        if (--held.users > 0) return;
        if (this.held.get(key) === held) this.held.delete(key);
        void held.binds.finally(() => rm(held.dir, { recursive: true, force: true }).catch(() => undefined));
      },
    };
  }

  /** Tenants holding copies now (for tests). */
  get size(): number {
    return this.held.size;
  }
}

interface ImageFile {
  target: string;
  mode: number;
  /** Inode, modification time and size: what changes when the file is replaced. */
  id: string;
}

/** The PRIVATE_FILES this image has as regular files (a symlink is never followed out of it). */
function imageFiles(imageRoot: string): ImageFile[] {
  const files: ImageFile[] = [];
  for (const target of PRIVATE_FILES) {
    let st;
    try {
      st = lstatSync(join(imageRoot, target));
    } catch {
      continue;
    }
    if (st.isFile()) files.push({ target, mode: st.mode, id: `${target}:${st.ino}:${st.mtimeMs}:${st.size}` });
  }
  return files;
}

async function copyInto(dir: string, imageRoot: string, files: ImageFile[]): Promise<PrivateBind[]> {
  const binds: PrivateBind[] = [];
  try {
    await mkdir(dir, { mode: 0o755 });
    for (const { target, mode } of files) {
      const copy = join(dir, basename(target));
      await copyFile(join(imageRoot, target), copy);
      await chmod(copy, mode & 0o755);
      binds.push([copy, target]);
    }
    return binds;
  } catch {
    await rm(dir, { recursive: true, force: true }).catch(() => undefined);
    return [];
  }
}
