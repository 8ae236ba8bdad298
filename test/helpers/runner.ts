// Spawns the real sandbox runner (dist/sandbox-runner/main.js) on a temp
// socket with its own state dir, cgroup subtree and a uid block reserved
// across concurrently running tests (mkdir lock under /tmp), and returns a
// RunnerClient connected to it. Must run as root.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomInt } from 'node:crypto';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { SANDBOX_WAIT } from '../../sandbox-runner/sandbox.js';

export const RUNNER_MAIN = fileURLToPath(new URL('../../sandbox-runner/main.js', import.meta.url));

export interface StartRunnerOptions {
  /** Extra --key=value options (e.g. { tmpfs_mb: '16' }). */
  options?: Record<string, string>;
  /** Reuse a state dir (recovery tests); default: a fresh temp dir. */
  stateDir?: string;
  /** Reuse a uid block (recovery tests restart a runner on the same range). */
  uidBlock?: UidBlock;
  uidCount?: number;
  /** Network namespace to run the runner in (a test host made by test/helpers/netns.ts). */
  netns?: string;
}

export interface UidBlock {
  base: number;
  count: number;
  release(): void;
}

export interface StartedRunner {
  client: RunnerClient;
  socketPath: string;
  stateDir: string;
  uidBlock: UidBlock;
  process: ChildProcess;
  /** stderr of the runner so far. */
  stderr(): string;
  /** stdout up to and including its ready line (and the TLS listener's address when configured). */
  stdout(): string;
  /** SIGTERM (graceful: destroys capsules), wait for exit, clean up temp state. */
  stop(): Promise<void>;
  /** SIGKILL without cleanup (crash simulation); keeps state dir and uid block. */
  kill(): Promise<void>;
}

const LOCK_ROOT = '/tmp/capsule-uid-blocks';
const BLOCK = 1024;

/** Reserves a random, non-overlapping block of host uids (atomic mkdir lock). */
export function reserveUidBlock(count = 256): UidBlock {
  mkdirSync(LOCK_ROOT, { recursive: true });
  for (let attempt = 0; attempt < 1000; attempt++) {
    const index = randomInt(100, 50000); // uids 102400 .. ~51M, far from system/user ranges
    const lock = join(LOCK_ROOT, String(index));
    try {
      mkdirSync(lock);
    } catch {
      continue;
    }
    return {
      base: index * BLOCK,
      count: Math.min(count, BLOCK),
      release: () => rmSync(lock, { recursive: true, force: true }),
    };
  }
  throw new Error('no free uid block');
}

/** Unmounts anything left mounted below dir (a crashed runner's tmpfs), then removes it. */
export function removeStateDir(dir: string): void {
  removeCgroups(cgroupNameOf(dir));
  const mounts = readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${dir}/`))
    .sort()
    .reverse();
  for (const m of mounts) spawnSync('umount', ['-l', m]);
  rmSync(dir, { recursive: true, force: true });
}

/** The cgroup name startRunner gives a runner over this state dir (stable: a restart finds its groups). */
export const cgroupNameOf = (stateDir: string): string =>
  `capsule-test-${createHash('sha256').update(stateDir).digest('hex').slice(0, 16)}`;

/**
 * Removes the groups a runner named `name` left in the cgroup hierarchies, deepest first: one killed
 * on purpose (a lost node, a crash) leaves its capsules' groups, empty once their processes died with
 * it (multi-node.test left 34 per run). A group still holding another process stays (rmdir refuses it).
 */
function removeCgroups(name: string): void {
  const dirs = (d: string): string[] => {
    try {
      return readdirSync(d, { withFileTypes: true })
        .filter((e) => e.isDirectory())
        .map((e) => join(d, e.name));
    } catch {
      return [];
    }
  };
  const remove = (d: string): void => {
    for (const c of dirs(d)) remove(c);
    // This process, the killed runner's supervisor, sits in its services' group (cgroup.ts confineRunner):
    // back to the group it came from, as a graceful stop moves it.
    try {
      if (readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n').includes(String(process.pid)))
        writeFileSync(join(d, '..', 'cgroup.procs'), String(process.pid));
    } catch {
      /* not in it, or cannot move: the group stays */
    }
    try {
      rmdirSync(d);
    } catch {
      /* not empty, or gone */
    }
  };
  const find = (d: string, depth: number): void => {
    for (const c of dirs(d)) {
      const base = c.slice(d.length + 1);
      if (base === name || base.startsWith(`${name}.`)) remove(c);
      else if (depth < 4 && !base.startsWith('capsule-') && !base.startsWith('cap_')) find(c, depth + 1);
    }
  };
  find('/sys/fs/cgroup', 0);
}

/**
 * A state dir and uid block of the test's own, for runners started one after another over them
 * (a restart, a crash's recovery); both are removed and released at the test's end.
 */
export function ownState(
  t: { teardown(f: () => void): void },
  prefix: string,
  uidCount = 16,
): { stateDir: string; uidBlock: UidBlock } {
  const stateDir = mkdtempSync(join(tmpdir(), prefix));
  const uidBlock = reserveUidBlock(uidCount);
  t.teardown(() => {
    removeStateDir(stateDir);
    uidBlock.release();
  });
  return { stateDir, uidBlock };
}

export async function startRunner(opts: StartRunnerOptions = {}): Promise<StartedRunner> {
  const stateDir = opts.stateDir ?? mkdtempSync(join(tmpdir(), 'capsule-runner-'));
  const uidBlock = opts.uidBlock ?? reserveUidBlock(opts.uidCount);
  const socketPath = join(stateDir, 'runner.sock');
  const args = [
    RUNNER_MAIN,
    `--state_dir=${stateDir}`,
    `--socket=${socketPath}`,
    `--uid_base=${uidBlock.base}`,
    `--uid_count=${uidBlock.count}`,
    // Stable per state dir, so a restarted runner (recovery tests) finds its old groups.
    `--cgroup_name=${cgroupNameOf(stateDir)}`,
    // A test or benchmark that crashes must not leave its runner (mounts, cgroups, uids) behind.
    ...Object.entries({ exit_with_parent: '1', ...opts.options }).map(([k, v]) => `--${k}=${v}`),
  ];
  // fd 3: an inherited descriptor the runner must never pass on into a capsule (checked by the escape battery).
  // nsenter --net changes the network namespace only (ip netns exec would remount /sys, hiding the cgroups).
  const [cmd, argv] = opts.netns
    ? ['nsenter', [`--net=/run/netns/${opts.netns}`, '--', process.execPath, ...args]]
    : [process.execPath, args];
  const child = spawn(cmd, argv, {
    stdio: ['ignore', 'pipe', 'pipe', 'pipe'],
    env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
  });
  let err = '';
  child.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  let out = '';
  await new Promise<void>((resolve, reject) => {
    const onExit = (code: number | null): void =>
      reject(new Error(`runner exited (${code}) before ready: ${err.trim()}`));
    child.once('exit', onExit);
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      if (out.includes('ready ')) {
        child.off('exit', onExit);
        resolve();
      }
    });
  });
  const client = new RunnerClient(socketPath);
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve();
    else child.once('exit', () => resolve());
  });
  return {
    client,
    socketPath,
    stateDir,
    uidBlock,
    process: child,
    stderr: () => err,
    stdout: () => out,
    async stop() {
      await client.close();
      child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 20000);
      await exited;
      clearTimeout(timer);
      if (!opts.stateDir) removeStateDir(stateDir);
      if (!opts.uidBlock) uidBlock.release();
    },
    async kill() {
      await client.close();
      child.kill('SIGKILL');
      await exited;
    },
  };
}

/** A command that keeps forking once at the capsule's process bound (each child sleeps), ignoring every EAGAIN. */
export const FORK_LOOP_AT_BOUND = `python3 -c "
import os, time
while True:
    try:
        if os.fork() == 0:
            time.sleep(30); os._exit(0)
    except OSError:
        pass
"`;

/**
 * A process the runner started ahead for a capsule's next exec: its wrapper (the capsule's uid, in
 * the host's pid namespace, `/bin/sh -c <script> capsule-exec ...`) or, once that sandbox is set up
 * ahead, bubblewrap, its pid 1 and the shell waiting inside: every one of them has the sandbox's
 * waiting script in its argv (an exec's shell replaces it with its own command).
 */
export function isWaitingWrapper(pid: string | number): boolean {
  try {
    const argv = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    return argv.includes(SANDBOX_WAIT);
  } catch {
    return false;
  }
}

/** Live (non-zombie) host processes owned by uid, now, less what waits for the capsule's next exec. */
export function liveProcsNow(uid: number): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      if (statSync(`/proc/${p}`).uid !== uid || isWaitingWrapper(p)) continue;
      const st = readFileSync(`/proc/${p}/stat`, 'utf8');
      if (st[st.lastIndexOf(')') + 2] !== 'Z') out.push(Number(p));
    } catch {
      /* gone */
    }
  }
  return out;
}

/** Live processes owned by uid, after giving exiting ones up to 1 s to finish dying. */
export async function liveProcs(uid: number): Promise<number[]> {
  const end = Date.now() + 1000;
  for (;;) {
    const now = liveProcsNow(uid);
    if (now.length === 0 || Date.now() > end) return now;
    await new Promise((r) => setTimeout(r, 20));
  }
}
