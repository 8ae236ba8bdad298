// Customer bytes the runner writes into a capsule's tmpfs (uploads, exec
// input, Capsulefile app files) are charged to the capsule's memory cgroup,
// not the runner's: tmpfs pages are charged to the cgroup of the process
// that first touches them (Documentation/admin-guide/cgroup-v2.rst, "Memory
// Ownership"), so the runner opens each file itself (the O_NOFOLLOW and type
// checks below) and hands the descriptors to a short-lived writer process
// that first joins the capsule's writer leaf (a child of its memory cgroup,
// see cgroup.ts) and copies the bytes from a pipe with dd.
//
// A full tmpfs gives ENOSPC (no_space); a capsule whose memory is full gets
// its writer OOM-killed (also no_space); the runner's own memory is never
// charged and the runner is never the OOM victim.
import { spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, constants, fchownSync, fstatSync, ftruncateSync, openSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { RunnerError, type FileEntry } from '../shared/runner-protocol.js';

const HOST_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';
const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const RO = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Joins the writer cgroup ($1), then copies exactly N bytes of stdin into
 * each descriptor 3, 4, ... (sizes in the remaining arguments). dd reopens
 * the descriptor through /proc/self/fd: the same inode the runner checked.
 */
const WRITER_SCRIPT =
  'echo $$ > "$1" || exit 125; shift; i=3; for n in "$@"; do ' +
  'dd iflag=fullblock,count_bytes bs=65536 count="$n" of=/proc/self/fd/$i conv=notrunc status=none || exit $?; ' +
  'i=$((i+1)); done';

export interface ChargedFile {
  dir: string;
  name: string;
  bytes: Uint8Array;
  /** Names the field in errors (filename, input_filename, app_files.filename). */
  field: string;
  /** Compute the entry's SHA-512 (exec input needs none). */
  hash: boolean;
}

function errnoToRunner(e: unknown, field: string): RunnerError {
  const code = (e as NodeJS.ErrnoException).code;
  if (code === 'ENOSPC') return new RunnerError('no_space', 'capsule tmpfs is full');
  if (code === 'ELOOP') return new RunnerError('invalid', `${field}: is a symbolic link; refused`);
  if (code === 'ENOENT') return new RunnerError('not_found', `${field}: no such file`);
  if (code === 'ENXIO' || code === 'EISDIR' || code === 'EACCES' || code === 'EPERM')
    return new RunnerError('invalid', `${field}: not a regular file; refused`);
  return new RunnerError('internal', `${field}: ${code ?? 'I/O error'}`);
}

/** Opens dir/name for writing as a regular file (never through a link, FIFO or device) and empties it. */
function openRegularForWrite(path: string, field: string): number {
  let fd: number;
  try {
    fd = openSync(path, WRITE_FLAGS, 0o644);
  } catch (e) {
    throw errnoToRunner(e, field);
  }
  try {
    if (!fstatSync(fd).isFile())
      throw new RunnerError('invalid', `${field}: exists and is not a regular file; refused`);
    // Truncate only after the type check (O_TRUNC on open would touch whatever it is).
    ftruncateSync(fd, 0);
  } catch (e) {
    closeSync(fd);
    throw e instanceof RunnerError ? e : errnoToRunner(e, field);
  }
  return fd;
}

/** Removes a half-written file: only a regular file, never what a link points to. */
function removePartial(path: string): void {
  try {
    const fd = openSync(path, RO);
    const isFile = fstatSync(fd).isFile();
    closeSync(fd);
    if (isFile) unlinkSync(path);
  } catch {
    /* nothing to remove */
  }
}

interface WriterOutcome {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
}

function runWriter(writerProcs: string, fds: number[], chunks: Uint8Array[]): Promise<WriterOutcome> {
  return new Promise((resolve) => {
    const child = spawn(
      '/bin/sh',
      ['-c', WRITER_SCRIPT, 'capsule-write', writerProcs, ...chunks.map((c) => String(c.byteLength))],
      {
        stdio: ['pipe', 'ignore', 'pipe', ...fds],
        env: { PATH: HOST_PATH, LC_ALL: 'C' },
      },
    );
    let stderr = '';
    child.stderr!.on('data', (b: Buffer) => {
      if (stderr.length < 4096) stderr += b.toString('utf8');
    });
    child.stdin!.on('error', () => undefined); // EPIPE when the writer died early: its status says why
    child.on('error', (e) => resolve({ code: null, signal: null, stderr: e.message }));
    child.on('close', (code, signal) => resolve({ code, signal, stderr }));
    for (const c of chunks) if (c.byteLength > 0) child.stdin!.write(c);
    child.stdin!.end();
  });
}

/**
 * Writes each file as a new regular file owned by uid, its pages charged to
 * the capsule (writerProcs: the cgroup.procs file of its writer leaf).
 * All or nothing: on failure every file this call created or emptied is removed.
 */
export async function writeCharged(writerProcs: string, uid: number, files: ChargedFile[]): Promise<FileEntry[]> {
  const opened: { path: string; fd: number }[] = [];
  let complete = false;
  try {
    for (const f of files) {
      const path = join(f.dir, f.name);
      opened.push({ path, fd: openRegularForWrite(path, f.field) });
    }
    const r = await runWriter(
      writerProcs,
      opened.map((o) => o.fd),
      files.map((f) => f.bytes),
    );
    if (r.code !== 0) {
      if (/No space left on device/.test(r.stderr)) throw new RunnerError('no_space', 'capsule tmpfs is full');
      if (r.signal === 'SIGKILL')
        // The capsule's memory cgroup (its processes plus its files) is full: the kernel OOM-killed the writer.
        throw new RunnerError('no_space', 'capsule memory is full (its files count against its memory limit)');
      throw new RunnerError(
        'internal',
        `write into capsule failed (${r.code ?? r.signal}): ${r.stderr.trim().slice(0, 200)}`,
      );
    }
    for (const o of opened) fchownSync(o.fd, uid, uid);
    complete = true;
  } finally {
    for (const o of opened) closeSync(o.fd);
    if (!complete) for (const o of opened) removePartial(o.path);
  }
  return files.map((f) => ({
    filename: f.name,
    size_bytes: f.bytes.byteLength,
    sha512: f.hash ? `sha512:${createHash('sha512').update(f.bytes).digest('hex')}` : '',
  }));
}
