// One sandboxed exec: spawn, bounded output capture, timeout (SIGTERM, then
// SIGKILL after a grace), OOM detection, and a final cgroup sweep so that no
// process of the exec outlives it.
import { createHash } from 'node:crypto';
import { chownSync, rmSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { constants } from 'node:os';
import {
  CpuDemotion,
  groupRunnableMs,
  groupPids,
  killGroup,
  oomKills,
  placeCpu,
  processLimitHits,
  procsFiles,
  signalGroup,
  type CapsuleCgroupPaths,
} from './cgroup.js';
import { systemClock, type Clock } from './clock.js';
import { mountinfoOfAsync, nsInodes, type MountLine, type NsName } from './host.js';
import {
  execScriptText,
  GO_FD,
  HOST_PATH,
  INFO_FD,
  sandboxArgv,
  scriptPath,
  wrapperArgv,
  wrapperUid,
  type ExecScript,
  type SandboxSpec,
} from './sandbox.js';
import { within } from '../shared/time.js';
import { RunnerError } from '../shared/runner-error.js';
import { spawner, type RemoteChild } from './spawner.js';
import type { ExecResult } from '../shared/runner-protocol.js';

/** How often a running exec's OOM kills and process-limit refusals are looked at. */
const BOUND_POLL_MS = 50;
/** Consecutive looks that each find new refused forks before the exec is stopped. */
const PROCESS_LIMIT_STRIKES = 2;
/** Refused forks in one look that stop the exec at once: a fork loop, whatever the next look finds. */
const FORK_LOOP_REFUSALS = 32;
/**
 * An exec whose processes are runnable (running or waiting for a CPU) for more than CPU_BOUND_MS
 * of a window of CPU_WINDOW_POLLS looks is CPU-bound batch work: its capsule's CPU weight is
 * divided by CPU_BOUND_DIVISOR until it ends. It still gets every cycle nobody else wants, but
 * another tenant's short command runs ahead of it instead of waiting its turn behind every
 * spinning capsule (a victim's exec beside nine spinners: 51 -> 30 ms p50).
 */
const CPU_WINDOW_POLLS = 4;
const CPU_BOUND_MS = 100;
const CPU_BOUND_DIVISOR = 16;

/**
 * An exec's output as its answer carries it: stdout's UTF-8 then stderr's in one buffer (invalid
 * sequences replaced by U+FFFD, as the text would read). Kept as bytes from the pipes to the frame:
 * a megabyte of output made into strings, copied to the serving thread and encoded back there held
 * that thread, shared by every tenant, for 300-700 ms (measured under control-char-flood).
 */
export interface ExecOutput {
  bytes: Uint8Array;
  stdout_bytes: number;
}

/** The wire result with its output as bytes. */
export interface ExecAnswer extends Omit<ExecResult, 'stdout' | 'stderr'> {
  output: ExecOutput;
}

/** The answer less its timestamp (stamped by the caller), plus what the sweep found. */
export interface ExecOutcome extends Omit<ExecAnswer, 'executed_at'> {
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

/** A sandbox started ahead of time inside the capsule's cgroups, waiting for its exec. */
export interface Prepared {
  child: RemoteChild;
  alive: boolean;
  /** The uid it runs as (null: root, see wrapperUid). */
  uid: number | null;
  /** Its sandbox argv (joined): a prepared sandbox serves only execs of the same shape. */
  shape: string;
  /** Settles once it is in every cgroup of the capsule ("go" must wait for it); rejects if it could not be moved. */
  joined: Promise<void>;
  /** Told its first "go": the sandbox is being (or has been) set up. */
  started: boolean;
  /** It joined the capsule's CPU group in the quick lane (cgroup.ts placeCpu). */
  quick: boolean;
  /** The sandbox's pid once it is set up and waits for its script; rejects if it ended first. */
  ready: Promise<number>;
  /** Its look once set up (prepareExec's `look`), taken then rather than on its exec's way; null: none taken. */
  seen: Promise<Seen | null> | null;
}

/** What an observation saw, before its kind is known. */
type Seen = Omit<SandboxObservation, 'kind'>;

/** The sandbox's namespaces and mounts while it waits for its command (null: it ended meanwhile). */
async function lookAt(pid: number, clock: Clock): Promise<Seen | null> {
  try {
    const at = clock.iso();
    const namespaces = nsInodes(pid);
    // Async: the read waits for the host's mount lock, and this thread starts every tenant's execs.
    return { at, pid, namespaces, mounts: await mountinfoOfAsync(pid) };
  } catch {
    return null;
  }
}

export interface ExecParams {
  spec: SandboxSpec;
  script: ExecScript;
  cgroup: CapsuleCgroupPaths;
  seccompPath: string;
  /** A prepared sandbox to use; a fresh one is started when absent, dead or of another shape. */
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
  /** Run in the quick lane (cgroup.ts placeCpu): the tenant has been light on CPU; left once CPU-bound. */
  quick?: boolean;
}

/**
 * One output stream, decoded as it arrives (invalid UTF-8 replaced by U+FFFD, as Buffer#toString
 * does) and hashed as it is: each chunk's work is done when the chunk comes, so a megabyte of
 * output is never decoded in one piece at the end on the exec thread every tenant shares.
 */
class Capture {
  private readonly parts: Buffer[] = [];
  // ignoreBOM: a leading byte order mark is output like any other character (toString keeps it).
  private readonly decoder = new TextDecoder('utf-8', { ignoreBOM: true });
  private readonly hash = createHash('sha512');
  private size = 0;
  private textBytes = 0;
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
    this.size += b.length;
    this.add(this.decoder.decode(b, { stream: true }));
  }
  private add(text: string): void {
    if (text === '') return;
    const u = Buffer.from(text, 'utf8');
    this.hash.update(u);
    this.parts.push(u);
    this.textBytes += u.length;
  }
  /** The stream is over: the text's UTF-8 (in parts) and its `sha512:` hash. */
  end(): { parts: Buffer[]; bytes: number; sha512: string } {
    this.add(this.decoder.decode()); // a sequence cut at the end reads as U+FFFD
    return { parts: this.parts, bytes: this.textBytes, sha512: `sha512:${this.hash.digest('hex')}` };
  }
}

const { signals } = constants;

/**
 * Starts the wrapper of the next exec: it joins the capsule's cgroups (as the capsule's uid it is
 * moved from here, libuv having dropped the groups, gid and uid before exec; as root, uid null, it
 * moves itself) and waits for "go". With `ahead`, it is told at once and the sandbox sets itself up
 * before the exec arrives; a sandbox nobody uses is set up and torn down for nothing, so that is
 * for execs that are likely to come (a capsule's first; later ones of a capsule that runs many).
 */
export function prepareExec(
  cgroup: CapsuleCgroupPaths,
  quick: boolean,
  spec: SandboxSpec,
  seccompPath: string,
  ahead: boolean,
  look = false,
  clock: Clock = systemClock,
): Prepared {
  const cgroupProcsFiles = procsFiles(cgroup, quick);
  const uid = wrapperUid(spec);
  const argv = sandboxArgv(spec);
  const { file, args } = wrapperArgv(uid === null ? cgroupProcsFiles : [], argv);
  const child = spawner.spawn(file, args, {
    stdio: ['ignore', 'pipe', 'pipe', { open: seccompPath }, 'pipe', 'pipe'],
    env: { PATH: HOST_PATH },
    ...(uid === null ? {} : { uid }),
  });
  const joined = child.ready.then((pid) =>
    uid === null
      ? undefined
      : Promise.all(cgroupProcsFiles.map((f) => writeFile(f, String(pid)))).then(() => undefined),
  );
  // Pipes arrive once the child exists (spawner.ts).
  const ready = child.ready.then(
    () =>
      new Promise<number>((resolve, reject) => {
        const info = child.stdio[INFO_FD];
        const control = child.stdio[GO_FD];
        if (!info || !control) return reject(new Error('sandbox pipes missing'));
        let pid = 0;
        let isReady = false;
        const settle = (): void => {
          if (pid && isReady) resolve(pid);
        };
        let text = '';
        info.on('data', (b: Buffer) => {
          if (pid) return;
          text += b.toString('utf8');
          const m = /"child-pid":\s*(\d+)/.exec(text);
          if (m) {
            pid = Number(m[1]);
            settle();
          }
        });
        control.on('data', () => {
          isReady = true;
          settle();
        });
        control.on('close', () => reject(new Error('the sandbox ended before it was set up')));
      }),
  );
  ready.catch(() => undefined);
  const p: Prepared = {
    child,
    alive: true,
    uid,
    shape: argv.join('\0'),
    joined,
    started: false,
    quick,
    ready,
    seen: null,
  };
  // Its exec will be observed (a capsule's first): look once it is set up, off that exec's way
  // (the mount table's read waits for the host's mount lock, p99 tens of ms under load).
  if (look)
    p.seen = ready.then(
      (pid) => lookAt(pid, clock),
      () => null,
    );
  joined.catch(() => {
    // WARNING: a wrapper outside the capsule's cgroups must never be told "go".
    p.alive = false;
    child.kill('SIGKILL');
  });
  if (ahead) setUpWhenJoined(p);
  child.on('exit', () => {
    p.alive = false;
  });
  child.on('error', () => {
    p.alive = false;
  });
  return p;
}

/** Its sandbox set up as soon as it is in every cgroup of the capsule, if it is still alive then. */
export function setUpWhenJoined(p: Prepared): void {
  p.joined.then(
    () => {
      if (p.alive) startSandbox(p);
    },
    () => undefined,
  );
}

/** Its first "go" (only once it is in the capsule's cgroups). */
function startSandbox(p: Prepared): void {
  if (p.started) return;
  p.started = true;
  p.child.stdio[GO_FD]?.write('go\n');
}

// async: a failure before the exec starts is a rejection, never a synchronous
// throw past a caller's .catch (destroy's probe relies on that).
export async function runExec(p: ExecParams): Promise<ExecOutcome> {
  const uid = wrapperUid(p.spec);
  const shape = sandboxArgv(p.spec).join('\0');
  // A sandbox of another shape or uid (the capsule's egress changed how it must start) is not used.
  const fits = p.prepared?.alive === true && p.prepared.uid === uid && p.prepared.shape === shape;
  if (p.prepared?.alive && !fits) p.prepared.child.kill('SIGKILL');
  const quick = p.quick === true;
  const prepared = fits ? p.prepared! : prepareExec(p.cgroup, quick, p.spec, p.seccompPath, false);
  const child = prepared.child;
  const script = scriptPath(p.spec.tmpfsDir);
  try {
    writeFileSync(script, execScriptText(p.script), { mode: 0o600 });
    // Readable by the sandbox alone (the capsule's uid; the directory is root's and bound read-only).
    chownSync(script, p.spec.hostUid, p.spec.hostUid);
  } catch (e) {
    // WARNING: the sandbox already waits inside the capsule's cgroup; left alive it would hold pids until destroy.
    child.kill('SIGKILL');
    // The capsule can fill its own tmpfs (blocks or inodes); the script lives there.
    if ((e as NodeJS.ErrnoException).code === 'ENOSPC')
      throw new RunnerError('no_space', 'command: the capsule tmpfs is full (no room to start the exec)');
    throw e;
  }
  try {
    await prepared.joined;
  } catch (e) {
    throw new RunnerError('internal', `exec wrapper could not join the capsule cgroups: ${(e as Error).message}`);
  }
  // A sandbox prepared while its tenant was in the other lane moves to the one chosen for this exec.
  if (prepared.quick !== quick) await placeCpu(p.cgroup, quick);
  startSandbox(prepared);
  if (p.observe) {
    // The sandbox is set up and waits: look at it before its command runs (best effort; an
    // absent observation is reported as such).
    const pid = await within(prepared.ready, 2000).catch(() => 0);
    const seen = pid ? await (prepared.seen ?? lookAt(pid, p.clock)) : null;
    if (seen) p.observe({ kind: p.observeKind ?? 'first_exec', ...seen });
  }
  const oomBefore = oomKills(p.cgroup);
  let limitHits = processLimitHits(p.cgroup);
  const start = p.clock.monotonicMs();
  child.stdio[GO_FD]?.end('go\n');
  const out = new Capture(p.maxOutputBytes);
  const err = new Capture(p.maxOutputBytes);
  child.stdout!.on('data', (b: Buffer) => out.push(b));
  child.stderr!.on('data', (b: Buffer) => err.push(b));

  let timedOut = false;
  let oomSeen = false;
  let limitStrikes = 0;
  let limitKilled = false;
  const demotion = new CpuDemotion(p.cgroup, CPU_BOUND_DIVISOR);
  let cpuBound = false;
  let ended = false;
  let polls = 0;
  let runnableMs = groupRunnableMs(p.cgroup);
  let killTimer: NodeJS.Timeout | null = null;
  const abort = (): void => {
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
  const boundPoll = setInterval(() => {
    // v1 has no group OOM kill: when the kernel killed one process, kill them all.
    if (!oomSeen && oomKills(p.cgroup) > oomBefore) {
      oomSeen = true;
      abort();
    }
    // Forks refused at pids.max in two looks in a row, or a burst of them in one: a fork loop, not
    // a program that met the bound once. Stopped like an OOM, because every refused fork has
    // already copied and torn down its address space under the kernel's per-file mapping locks
    // (libc's, shared with every process on the node): left running, it stalls every tenant's
    // process starts.
    const hits = processLimitHits(p.cgroup);
    limitStrikes = hits > limitHits ? limitStrikes + 1 : 0;
    const burst = hits - limitHits >= FORK_LOOP_REFUSALS;
    limitHits = hits;
    if ((limitStrikes >= PROCESS_LIMIT_STRIKES || burst) && !limitKilled) {
      limitKilled = true;
      abort();
    }
    if (++polls % CPU_WINDOW_POLLS === 0) {
      const now = groupRunnableMs(p.cgroup);
      if (now - runnableMs >= CPU_BOUND_MS) cpuBound = true;
      runnableMs = now;
      // Again at every window: a re-weigh by the runner (another capsule of the tenant came or went)
      // undid it, or a process forked while the others left the quick lane.
      if (cpuBound) {
        // Lowered once out of the lane (the lowered weight is the capsules group's), unless it ended meanwhile.
        if (quick) void placeCpu(p.cgroup, false).then(() => ended || demotion.lower());
        else demotion.lower();
      }
    }
  }, BOUND_POLL_MS);

  const [code, signal] = await child.closed;
  ended = true;
  // The script held this exec's env: it is not left for the next one to read.
  rmSync(script, { force: true });
  clearTimeout(timeout);
  if (killTimer) clearTimeout(killTimer);
  clearInterval(boundPoll);
  demotion.restore();
  const duration = p.clock.monotonicMs() - start;
  const leftover = groupPids(p.cgroup).length;
  if (leftover > 0) await killGroup(p.cgroup, 2000, false);
  const oom = oomSeen || oomKills(p.cgroup) > oomBefore;
  // The shell convention 128 + signal number, for any signal (not only KILL and TERM).
  const sigNum = signal ? signals[signal] : 0;
  const stdout = out.end();
  const stderr = err.end();
  return {
    output: {
      bytes: Buffer.concat([...stdout.parts, ...stderr.parts], stdout.bytes + stderr.bytes),
      stdout_bytes: stdout.bytes,
    },
    stdout_sha512: stdout.sha512,
    stderr_sha512: stderr.sha512,
    stdout_truncated: out.truncated,
    stderr_truncated: err.truncated,
    exit_code: code ?? 128 + sigNum,
    // Whole milliseconds: the SPEC types duration_ms as an integer.
    duration_ms: Math.round(duration),
    timed_out: timedOut,
    oom_killed: oom,
    process_limit_killed: limitKilled,
    leftover_killed: leftover,
  };
}
