// Directory-relative walk of a capsule tmpfs, as root, over a tree the
// capsule user controlled. Every open is relative to an open directory fd
// (through /proc/self/fd/<fd>/<name>, the openat(2) of a runtime without
// one), so the path handed to the kernel is never longer than one name:
// trees nested past PATH_MAX are walked, and names are raw bytes (never
// decoded), so odd bytes are walked too. Opens are O_NOFOLLOW: a symlink is
// never followed. At most two directory fds are open at a time (the walk
// climbs back with ".."), the walk never leaves the tmpfs (st_dev checked),
// and a directory is visited once (st_ino checked).
import { closeSync, constants, fstatSync, openSync, readdirSync, type Dirent } from 'node:fs';

export const DIR_FLAGS = constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const DOTDOT = Buffer.from('..');
const SLASH = Buffer.from('/');

/** The path of name inside the directory open as dirFd: never longer than one name plus a short prefix. */
export function atPath(dirFd: number, name?: Buffer): Buffer {
  const p = Buffer.from(`/proc/self/fd/${dirFd}`);
  return name ? Buffer.concat([p, SLASH, name]) : p;
}

export function errCode(e: unknown): string {
  const code = (e as NodeJS.ErrnoException)?.code;
  return typeof code === 'string' && /^E[A-Z0-9]+$/.test(code) ? code : 'EIO';
}

export interface WalkVisitor {
  /** A regular file (by directory entry type) named `name` in the directory open as dirFd. */
  file(dirFd: number, name: Buffer): void;
  /** Anything that is neither a regular file nor a directory (symlink, FIFO, socket, device). */
  other(): void;
  /** An entry the walk could not look into; what: e.g. "directory", code: errno name. */
  problem(what: string, code: string): void;
}

interface Entry {
  name: Buffer;
  kind: 'file' | 'dir' | 'other';
}

function listDir(fd: number, v: WalkVisitor): Entry[] {
  let ents: Dirent<Buffer>[];
  try {
    ents = readdirSync(atPath(fd), { withFileTypes: true, encoding: 'buffer' });
  } catch (e) {
    v.problem('unreadable directory', errCode(e));
    return [];
  }
  const out = ents.map((d): Entry => ({
    name: d.name,
    kind: d.isDirectory() ? 'dir' : d.isFile() ? 'file' : 'other',
  }));
  // Byte order of the full path: a directory sorts as "name/" (so "b/x" < "big", as whole paths do).
  const key = (e: Entry): Buffer => (e.kind === 'dir' ? Buffer.concat([e.name, SLASH]) : e.name);
  return out.sort((a, b) => Buffer.compare(key(a), key(b)));
}

/**
 * Walks every entry under root depth-first in path byte order and calls the
 * visitor; never throws for what it finds (it reports a problem instead).
 */
export function walkTree(root: string, v: WalkVisitor): void {
  let cur: number;
  try {
    cur = openSync(root, DIR_FLAGS);
  } catch (e) {
    v.problem('root', errCode(e));
    return;
  }
  try {
    const rootSt = fstatSync(cur);
    const seenDirs = new Set<number>([rootSt.ino]);
    const stack: { entries: Entry[]; i: number }[] = [{ entries: listDir(cur, v), i: 0 }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      if (top.i >= top.entries.length) {
        stack.pop();
        if (stack.length === 0) break;
        // Climb back. The tree is static here (capsule processes are dead); if it moved anyway,
        // the dev check keeps the walk inside the tmpfs and what it misses is reported.
        let up: number;
        try {
          up = openSync(atPath(cur, DOTDOT), DIR_FLAGS);
        } catch (e) {
          for (const f of stack) for (let k = f.i; k < f.entries.length; k++) v.problem('walk aborted', errCode(e));
          return;
        }
        closeSync(cur);
        cur = up;
        if (fstatSync(cur).dev !== rootSt.dev) {
          for (const f of stack) for (let k = f.i; k < f.entries.length; k++) v.problem('walk aborted', 'EXDEV');
          return;
        }
        continue;
      }
      const e = top.entries[top.i++]!;
      if (e.kind === 'file') v.file(cur, e.name);
      else if (e.kind === 'other') v.other();
      else {
        let child: number;
        try {
          child = openSync(atPath(cur, e.name), DIR_FLAGS);
        } catch (err) {
          // ELOOP: replaced by a symlink since the listing; never followed.
          if (errCode(err) === 'ELOOP' || errCode(err) === 'ENOTDIR') v.other();
          else v.problem('unreadable directory', errCode(err));
          continue;
        }
        const st = fstatSync(child);
        if (st.dev !== rootSt.dev || seenDirs.has(st.ino)) {
          closeSync(child);
          if (st.dev !== rootSt.dev) v.problem('directory on another filesystem', 'EXDEV');
          continue;
        }
        seenDirs.add(st.ino);
        const entries = listDir(child, v);
        closeSync(cur);
        cur = child;
        stack.push({ entries, i: 0 });
      }
    }
  } finally {
    closeSync(cur);
  }
}
