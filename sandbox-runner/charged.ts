// Customer bytes the runner writes into a capsule's tmpfs (uploads, exec
// input, Capsulefile app files) are charged to the capsule's memory cgroup,
// not the runner's: tmpfs pages are charged to the cgroup of the process
// that first touches them (Documentation/admin-guide/cgroup-v2.rst, "Memory
// Ownership"), so the runner opens each file itself (the O_NOFOLLOW and type
// checks below) and hands the descriptors to a short-lived writer process
// that first joins the capsule's writer leaf (a child of its memory cgroup,
// see cgroup.ts; on v1 also the capsule's CPU group) and copies the bytes from
// a pipe with dd. A capsule's first
// writer starts with the capsule, each next one ahead of time, like the exec wrapper.
//
// A full tmpfs gives ENOSPC (no_space); a capsule whose memory is full gets
// its writer OOM-killed (also no_space); the runner's own memory is never
// charged and the runner is never the OOM victim.
import { createHash } from 'node:crypto';
import { closeSync, constants, fchownSync, fstatSync, ftruncateSync, openSync, unlinkSync } from 'node:fs';
import { join } from 'node:path';
import { RunnerError } from '../shared/runner-error.js';
import type { FileEntry } from '../shared/runner-protocol.js';
import { spawner, type RemoteChild } from './spawner.js';
import { HOST_PATH } from './sandbox.js';

const HASH_SLICE = 1 << 20;
const WRITE_FLAGS = constants.O_WRONLY | constants.O_CREAT | constants.O_NOFOLLOW | constants.O_NONBLOCK;
const RO = constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK;

/**
 * Joins the writer's cgroups (its arguments), then reads one header line naming where each
 * file goes and its size (`/proc/<runner pid>/fd/<fd>:<bytes> ...`: the very
 * descriptor the runner opened and checked, reopened through its magic link,
 * never a path in the capsule's tmpfs), then copies exactly that many bytes
 * of stdin into each. dash's `read` takes the header byte by byte, so the
 * file bytes that follow it on the pipe are left for dd. Being started ahead
 * of time (prepareWriter), the cgroup join (several ms on cgroup v1) is off
 * the upload's path.
 */
const DD = 'dd iflag=fullblock,count_bytes bs=65536 conv=notrunc status=none';
const WRITER_SCRIPT =
  'for f; do echo $$ > "$f" || exit 125; done; read -r header || exit 125; set -- $header; ' +
  // One file (an upload, an exec's input): dd replaces the shell, one fork fewer on the upload's path.
  `if [ $# -eq 1 ]; then exec ${DD} count="\${1##*:}" of="\${1%:*}"; fi; ` +
  `for spec; do ${DD} count="\${spec##*:}" of="\${spec%:*}" || exit $?; done`;

/** A writer process started ahead of an upload, already in the capsule's writer leaf (or on its way there). */
export interface PreparedWriter {
  child: RemoteChild;
  alive: boolean;
  stderr: string;
  done: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts a writer that joins every cgroup in writerProcs and waits for its header on stdin. */
export function prepareWriter(writerProcs: string[]): PreparedWriter {
  const child = spawner.spawn('/bin/sh', ['-c', WRITER_SCRIPT, 'capsule-write', ...writerProcs], {
    stdio: ['pipe', 'ignore', 'pipe'],
    env: { PATH: HOST_PATH, LC_ALL: 'C' },
  });
  const w: PreparedWriter = {
    child,
    alive: true,
    stderr: '',
    done: child.closed.then(([code, signal]) => ({ code, signal })),
  };
  child.on('exit', () => {
    w.alive = false;
  });
  child.on('error', (e) => {
    w.alive = false;
    w.stderr += e.message;
  });
  // (An EPIPE on stdin, when the writer died early, is ignored by RemoteChild: its status says why.)
  void child.ready.then(() =>
    child.stderr!.on('data', (b: Buffer) => {
      if (w.stderr.length < 4096) w.stderr += b.toString('utf8');
    }),
  );
  return w;
}

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

export interface WriterResult {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  /** SHA-512 (hex) of each chunk whose hash was asked for, computed before the bytes were zeroed. */
  sha512: (string | null)[];
}

/** Runs one write: the header line, then each file's bytes, on a writer's stdin (prepared, or started now). */
export async function runWriter(
  writerProcs: string[],
  prepared: PreparedWriter | null,
  header: string,
  chunks: Uint8Array[],
  hash: boolean[],
): Promise<WriterResult> {
  const w = prepared && prepared.alive ? prepared : prepareWriter(writerProcs);
  // Hashed in 1 MiB slices, yielding between them: no copy of the bytes, and the thread keeps serving.
  const digests = chunks.map((c, i) => (hash[i] ? sha512Sliced(c) : null));
  const started = await w.child.ready.then(
    () => true,
    () => false,
  );
  if (started) {
    const stdin = w.child.stdin!;
    stdin.write(`${header}\n`);
    for (const c of chunks) if (c.byteLength > 0) stdin.write(c);
    stdin.end();
  }
  const r = await w.done;
  const sha512 = await Promise.all(digests);
  return { ...r, stderr: w.stderr, sha512 };
}

async function sha512Sliced(bytes: Uint8Array): Promise<string> {
  const h = createHash('sha512');
  for (let at = 0; at < bytes.byteLength; at += HASH_SLICE) {
    h.update(bytes.subarray(at, at + HASH_SLICE));
    if (at + HASH_SLICE < bytes.byteLength) await new Promise((r) => setImmediate(r));
  }
  return h.digest('hex');
}

/**
 * Starts the writer process and feeds it (exec-host.ts runs it in the exec thread).
 * WARNING: the chunks may be moved to that thread: read their sizes before, never their bytes after.
 */
export type WriterRun = (header: string, chunks: Uint8Array[], hash: boolean[]) => Promise<WriterResult>;

/**
 * Writes each file as a new regular file owned by uid, its pages charged to
 * the capsule (its writer joins cgroup.ts writerProcsFiles).
 * All or nothing: on failure every file this call created or emptied is removed.
 */
export async function writeCharged(uid: number, files: ChargedFile[], run: WriterRun): Promise<FileEntry[]> {
  const opened: { path: string; fd: number }[] = [];
  const sizes = files.map((f) => f.bytes.byteLength);
  let complete = false;
  let r: WriterResult;
  try {
    for (const f of files) {
      const path = join(f.dir, f.name);
      opened.push({ path, fd: openRegularForWrite(path, f.field) });
    }
    // The very descriptors opened and checked above, reopened by the writer through the runner's /proc.
    const header = opened.map((o, i) => `/proc/${process.pid}/fd/${o.fd}:${sizes[i]}`).join(' ');
    r = await run(
      header,
      files.map((f) => f.bytes),
      files.map((f) => f.hash),
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
  return files.map((f, i) => ({
    filename: f.name,
    size_bytes: sizes[i]!,
    sha512: r.sha512[i] ? `sha512:${r.sha512[i]}` : '',
  }));
}
