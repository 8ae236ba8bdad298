// File transfer into and out of a capsule's tmpfs, done by the (root) runner
// on the host side of the tmpfs.
//
// WARNING: the directories hold files the capsule user controls. Only names
// of one path component are accepted (the parent is a bwrap mount point the
// capsule cannot swap), and every open is O_NOFOLLOW|O_NONBLOCK followed by
// an fstat check: a symlink, FIFO or device is never followed, read or written.
import { createHash } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readdirSync, readSync } from 'node:fs';
import { join } from 'node:path';
import { RunnerError, type FileEntry, type ListedFile } from '../shared/runner-protocol.js';

/** A single path component: no '/', no NUL, no control characters, not . or .., at most 255 bytes. */
export function validateFilename(name: unknown, field = 'filename'): string {
  if (typeof name !== 'string' || name.length === 0)
    throw new RunnerError('invalid', `${field}: must be a non-empty string`);
  if (Buffer.byteLength(name) > 255) throw new RunnerError('invalid', `${field}: longer than 255 bytes`);
  if (name === '.' || name === '..') throw new RunnerError('invalid', `${field}: must not be . or ..`);
  if (name.includes('/'))
    throw new RunnerError('invalid', `${field}: must be a plain name without '/' (no paths, no traversal)`);
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(name))
    throw new RunnerError('invalid', `${field}: must not contain NUL or control characters`);
  return name;
}

const RO = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

function errnoToRunner(e: unknown, field: string): RunnerError {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC') return new RunnerError('no_space', 'capsule tmpfs is full');
  if (code === 'ELOOP') return new RunnerError('invalid', `${field}: is a symbolic link; refused`);
  if (code === 'ENOENT') return new RunnerError('not_found', `${field}: no such file`);
  if (code === 'ENXIO' || code === 'EISDIR' || code === 'EACCES' || code === 'EPERM')
    return new RunnerError('invalid', `${field}: not a regular file; refused`);
  return new RunnerError('internal', `${field}: ${code ?? 'I/O error'}`);
}

interface OpenedRegular {
  fd: number;
  size: number;
}

function openRegular(path: string, field: string): OpenedRegular {
  let fd: number;
  try {
    fd = openSync(path, RO);
  } catch (e) {
    throw errnoToRunner(e, field);
  }
  const st = fstatSync(fd);
  if (!st.isFile()) {
    closeSync(fd);
    throw new RunnerError('invalid', `${field}: not a regular file; refused`);
  }
  return { fd, size: st.size };
}

/** SHA-512 of the first `size` bytes (the size fstat gave: a file growing meanwhile is not read for ever). */
function hashFd(fd: number, size: number): string {
  const h = createHash('sha512');
  const buf = Buffer.allocUnsafe(Math.min(1024 * 1024, Math.max(size, 1)));
  let pos = 0;
  while (pos < size) {
    const n = readSync(fd, buf, 0, Math.min(buf.length, size - pos), pos);
    if (n === 0) break;
    h.update(buf.subarray(0, n));
    pos += n;
  }
  buf.fill(0);
  return `sha512:${h.digest('hex')}`;
}

/**
 * Regular files directly in dir, with size and sha512; anything else is
 * skipped, never followed. Hashing reads at most hashBudget bytes in all
 * (the caller passes what the tmpfs can hold): each inode is hashed once
 * (hard links reuse its digest), and a file that would take the total past
 * the budget (a sparse file larger than the tmpfs) is listed with sha512
 * null instead of being read for ever. Synchronous: run it off the serving
 * event loop (offloop.ts).
 */
export function listRegular(dir: string, hashBudget: number): ListedFile[] {
  const out: ListedFile[] = [];
  let names: string[];
  try {
    names = readdirSync(dir, { withFileTypes: true })
      .filter((d) => d.isFile())
      .map((d) => d.name)
      .sort();
  } catch {
    return [];
  }
  const digests = new Map<bigint, string>();
  let budget = hashBudget;
  for (const name of names) {
    let fd: number;
    try {
      fd = openSync(join(dir, name), RO);
    } catch {
      continue; // replaced by a symlink/FIFO since readdir: skip it
    }
    try {
      const st = fstatSync(fd, { bigint: true });
      if (!st.isFile()) continue;
      let digest = digests.get(st.ino) ?? null;
      if (digest === null && st.size <= BigInt(budget)) {
        budget -= Number(st.size);
        digest = hashFd(fd, Number(st.size));
        digests.set(st.ino, digest);
      }
      out.push({ filename: name, size_bytes: Number(st.size), sha512: digest });
    } catch {
      continue;
    } finally {
      closeSync(fd);
    }
  }
  return out;
}

/** Reads one regular file directly in dir, bounded by maxBytes. */
export function readRegular(dir: string, name: string, maxBytes: number): { entry: FileEntry; bytes: Buffer } {
  const f = openRegular(join(dir, name), 'filename');
  try {
    if (f.size > maxBytes)
      throw new RunnerError('too_large', `filename: ${f.size} bytes exceeds the read bound of ${maxBytes}`);
    const bytes = Buffer.alloc(f.size);
    let pos = 0;
    while (pos < f.size) {
      const n = readSync(f.fd, bytes, pos, f.size - pos, pos);
      if (n === 0) break;
      pos += n;
    }
    const data = bytes.subarray(0, pos);
    return {
      entry: { filename: name, size_bytes: pos, sha512: `sha512:${createHash('sha512').update(data).digest('hex')}` },
      bytes: data,
    };
  } finally {
    closeSync(f.fd);
  }
}
