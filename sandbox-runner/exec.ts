// One sandboxed exec: spawn, bounded output capture, timeout (SIGTERM, then
// SIGKILL after a grace), OOM detection, and a final cgroup sweep so that no
// process of the exec outlives it.
import { createHash } from 'node:crypto';
import { chownSync, readFileSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { constants } from 'node:os';
import { groupPids, killGroup, oomKills, procsFiles, signalGroup, type CapsuleCgroupPaths } from './cgroup.js';
import type { Clock } from './clock.js';
import { mountinfoOf, nsInodes, type MountLine, type NsName } from './host.js';
import {
  argFileText,
  BLOCK_FD,
  GO_FD,
  HOST_PATH,
  INFO_FD,
  sandboxArgv,
  wrapperArgv,
  wrapperUid,
  type SandboxSpec,
} from './sandbox.js';
import { RunnerError } from '../shared/runner-error.js';
import { spawner, type RemoteChild } from './spawner.js';
import type { ExecResult } from '../shared/runner-protocol.js';

/** The wire result less its timestamp (stamped by the caller), plus what the sweep found. */
export interface ExecOutcome extends Omit<ExecResult, 'executed_at'> {
  /** Processes still in the group after the exec ended, before the sweep killed them. */
  leftover_killed: number;
}

export interface SandboxObservation {
  /** first_exec: the capsule's first command; destroy_probe: `true` run at destroy because none ran. */
  kind: 'first_exec' | 'destroy_probe';
  at: string;
  pid: number;
  namespaces: Partial<Record<NsName, string>>;
  mounts: MountLine[];
}

/** A wrapper started ahead of time, waiting inside the capsule's cgroups for "go". */
export interface Prepared {
  child: RemoteChild;
  alive: boolean;
  /** The uid it runs as (null: root, see wrapperUid). */
  uid: number | null;
  /** Settles once it is in every cgroup of the capsule ("go" must wait for it); rejects if it could not be moved. */
  joined: Promise<void>;
}

export interface ExecParams {
  spec: SandboxSpec;
  cgroup: CapsuleCgroupPaths;
  seccompPath: string;
  /** Root-only file on the capsule tmpfs the wrapper sources. */
  argFile: string;
  /** A prepared wrapper to use; a fresh one is started when absent or dead. */
  prepared?: Prepared | null;
  timeoutMs: number;
  killGraceMs: number;
  maxOutputBytes: number;
  clock: Clock;
  /** Called with the sandbox's namespaces/mounts when bwrap reports its child pid. */
  observe?: (o: SandboxObservation) => void;
  observeKind?: SandboxObservation['kind'];
  /** Lets the caller (destroy) abort the exec: kills the whole group. */
  onStart?: (abort: () => void) => void;
}

/** Whether pid is currently inside read(fd) (from /proc/<pid>/syscall: "0 0x<fd> ..."). */
function blockedOnFd(pid: number, fd: number): boolean {
  try {
    return readFileSync(`/proc/${pid}/syscall`, 'utf8').startsWith(`0 0x${fd.toString(16)} `);
  } catch {
    return false;
  }
}

class Capture {
  private chunks: Buffer[] = [];
  private size = 0;
  truncated = false;
  constructor(private readonly max: number) {}
  push(b: Buffer): void {
    if (this.size >= this.max) {
      this.truncated = true;
      return;
    }
    const room = this.max - this.size;
    if (b.length > room) {
      this.truncated = true;
      b = b.subarray(0, room);
    }
    this.chunks.push(b);
    this.size += b.length;
  }
  text(): string {
    return Buffer.concat(this.chunks).toString('utf8');
  }
}

const { signals } = constants;

const sha512Of = (text: string): string => `sha512:${createHash('sha512').update(text, 'utf8').digest('hex')}`;

/**
 * Starts the wrapper of the next exec, waiting for "go". As the capsule's uid (libuv drops the
 * groups, then the gid and uid, before exec), moved into the cgroups from here; as root (uid null)
 * it moves itself.
 */
export function prepareExec(
  cgroupProcsFiles: string[],
  argFile: string,
  seccompPath: string,
  uid: number | null,
): Prepared {
  const { file, args } = wrapperArgv(uid === null ? cgroupProcsFiles : [], argFile);
  const child = spawner.spawn(file, args, {
    stdio: ['ignore', 'pipe', 'pipe', { open: seccompPath }, 'pipe', 'pipe', 'pipe'],
    env: { PATH: HOST_PATH },
    ...(uid === null ? {} : { uid }),
  });
  const joined = child.ready.then((pid) =>
    uid === null
      ? undefined
      : Promise.all(cgroupProcsFiles.map((f) => writeFile(f, String(pid)))).then(() => undefined),
  );
  const p: Prepared = { child, alive: true, uid, joined };
  joined.catch(() => {
    // WARNING: a wrapper outside the capsule's cgroups must never be told "go".
    p.alive = false;
    child.kill('SIGKILL');
  });
  child.on('exit', () => {
    p.alive = false;
  });
  child.on('error', () => {
    p.alive = false;
  });
  return p;
}

// async: a failure before the exec starts is a rejection, never a synchronous
// throw past a caller's .catch (destroy's probe relies on that).
export async function runExec(p: ExecParams): Promise<ExecOutcome> {
  const observing = p.observe !== undefined;
  const uid = wrapperUid(p.spec);
  // A wrapper of another uid (the capsule's egress changed how it must start) is not used.
  if (p.prepared && p.prepared.alive && p.prepared.uid !== uid) p.prepared.child.kill('SIGKILL');
  const prepared =
    p.prepared && p.prepared.alive && p.prepared.uid === uid
      ? p.prepared
      : prepareExec(procsFiles(p.cgroup), p.argFile, p.seccompPath, uid);
  const child = prepared.child;
  try {
    writeFileSync(p.argFile, argFileText(sandboxArgv({ ...p.spec, block: observing }), observing), { mode: 0o600 });
    // Readable by the wrapper alone: root, or the capsule's uid (the file is never bound inside).
    if (uid !== null) chownSync(p.argFile, uid, uid);
  } catch (e) {
    // WARNING: the wrapper already waits inside the capsule's cgroup; left alive it would hold a pid until destroy.
    child.kill('SIGKILL');
    // The capsule can fill its own tmpfs (blocks or inodes); the argument file lives there.
    if ((e as NodeJS.ErrnoException).code === 'ENOSPC')
      throw new RunnerError('no_space', 'command: the capsule tmpfs is full (no room to start the exec)');
    throw e;
  }
  try {
    await prepared.joined;
  } catch (e) {
    throw new RunnerError('internal', `exec wrapper could not join the capsule cgroups: ${(e as Error).message}`);
  }
  const oomBefore = oomKills(p.cgroup);
  const start = p.clock.monotonicMs();
  const stdio = child.stdio;
  stdio[GO_FD]!.end('go\n');
  const out = new Capture(p.maxOutputBytes);
  const err = new Capture(p.maxOutputBytes);
  child.stdout!.on('data', (b: Buffer) => out.push(b));
  child.stderr!.on('data', (b: Buffer) => err.push(b));
  const info = stdio[INFO_FD] ?? null;
  const block = stdio[BLOCK_FD] ?? null;
  if (!observing) block?.end();
  let released = false;
  const release = (): void => {
    if (released || !block || !observing) return;
    released = true;
    block.end('g');
  };
  if (info && p.observe) {
    let text = '';
    info.on('data', (b: Buffer) => {
      text += b.toString('utf8');
      const m = /"child-pid":\s*(\d+)/.exec(text);
      if (m) {
        const pid = Number(m[1]);
        text = '';
        // info-fd fires right after clone(); the sandbox is fully set up only
        // once the child sits in read(BLOCK_FD). Wait for that, then look.
        const deadline = p.clock.monotonicMs() + 2000;
        const look = (): void => {
          if (released) return;
          if (!blockedOnFd(pid, BLOCK_FD) && p.clock.monotonicMs() < deadline) {
            setTimeout(look, 1);
            return;
          }
          try {
            if (blockedOnFd(pid, BLOCK_FD))
              p.observe?.({
                kind: p.observeKind ?? 'first_exec',
                at: p.clock.iso(),
                pid,
                namespaces: nsInodes(pid),
                mounts: mountinfoOf(pid),
              });
          } catch {
            /* observation is best effort; absence is reported as such */
          }
          release();
        };
        look();
      }
    });
    info.on('end', () => setTimeout(release, 2000).unref());
  } else info?.resume();

  let timedOut = false;
  let oomSeen = false;
  let killTimer: NodeJS.Timeout | null = null;
  const abort = (): void => {
    release();
    signalGroup(p.cgroup, 'SIGKILL');
    child.kill('SIGKILL');
  };
  p.onStart?.(abort);
  const timeout = setTimeout(() => {
    timedOut = true;
    // SIGTERM the workload only: the outer bwrap (our direct child) must stay
    // to report the command's status; it is SIGKILLed with the rest after the grace.
    signalGroup(p.cgroup, 'SIGTERM', child.pid ?? null);
    killTimer = setTimeout(abort, p.killGraceMs);
  }, p.timeoutMs);
  // v1 has no group OOM kill: when the kernel killed one process, kill them all.
  const oomPoll = setInterval(() => {
    if (!oomSeen && oomKills(p.cgroup) > oomBefore) {
      oomSeen = true;
      abort();
    }
  }, 50);

  const [code, signal] = await child.closed;
  clearTimeout(timeout);
  if (killTimer) clearTimeout(killTimer);
  clearInterval(oomPoll);
  const duration = p.clock.monotonicMs() - start;
  const leftover = groupPids(p.cgroup).length;
  if (leftover > 0) await killGroup(p.cgroup, 2000, false);
  const oom = oomSeen || oomKills(p.cgroup) > oomBefore;
  // The shell convention 128 + signal number, for any signal (not only KILL and TERM).
  const sigNum = signal ? signals[signal] : 0;
  const stdout = out.text();
  const stderr = err.text();
  return {
    stdout,
    stderr,
    stdout_sha512: sha512Of(stdout),
    stderr_sha512: sha512Of(stderr),
    stdout_truncated: out.truncated,
    stderr_truncated: err.truncated,
    exit_code: code ?? 128 + sigNum,
    // Whole milliseconds: the SPEC types duration_ms as an integer.
    duration_ms: Math.round(duration),
    timed_out: timedOut,
    oom_killed: oom,
    leftover_killed: leftover,
  };
}
