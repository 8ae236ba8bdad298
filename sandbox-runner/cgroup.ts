// Per-capsule cgroups (isolation layer 5) on cgroup v2, v1 or the hybrid
// layout. Capsule groups are created under the runner's own cgroup (read from
// /proc/self/cgroup) inside a subtree named for this runner; the hierarchy
// itself is never reorganized (the one mount flag the runner may set is in
// cgroup-dynmods.ts).
//
// v2: memory.max, memory.swap.max=0, memory.oom.group=1, pids.max, cpu.weight,
//     OOM count from memory.events, kill via cgroup.kill.
// v1: memory.limit_in_bytes, memory.memsw.limit_in_bytes (= no swap),
//     pids.max, cpu.shares, OOM count from memory.oom_control; v1 has no
//     group OOM kill, so the runner kills the whole group when the count moves.
import { existsSync, mkdirSync, readFileSync, readdirSync, rmdirSync, writeFileSync } from 'node:fs';
import { mkdir, readFile, rmdir, writeFile } from 'node:fs/promises';
import { availableParallelism } from 'node:os';
import { basename, dirname, join } from 'node:path';

export type CgroupMode = 'v1' | 'v2' | 'hybrid';

export interface CgroupLimits {
  memoryBytes: number;
  pidsMax: number;
  /** cgroup v2 cpu.weight scale, 1..10000 (100 = default). */
  cpuWeight: number;
}

/** The directories of one capsule's cgroup; persisted in the capsule state for recovery. */
export interface CapsuleCgroupPaths {
  mode: CgroupMode;
  /** v2: the one directory. v1: the memory directory. */
  memory: string;
  pids: string | null;
  cpu: string | null;
  /**
   * v1: the capsule's directory in the quick lane (see CgroupManager.open), where the execs of a
   * tenant that has been light on CPU run. Absent in records written before the lane existed.
   */
  quick?: string | null;
  /**
   * v1 with cpuacct mounted apart from cpu: the capsule's CPU accounting group, which every
   * process of the capsule joins (cpuUsageMs). Absent in records written before it existed.
   */
  acct?: string | null;
}

interface Mount {
  root: string;
  mountPoint: string;
  fstype: string;
  superOpts: string[];
}

function readMounts(): Mount[] {
  const out: Mount[] = [];
  for (const line of readFileSync('/proc/self/mountinfo', 'utf8').split('\n')) {
    if (!line) continue;
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const f = pre.split(' ');
    const p = post.split(' ');
    out.push({
      root: f[3] ?? '',
      mountPoint: (f[4] ?? '').replace(/\\040/g, ' '),
      fstype: p[0] ?? '',
      superOpts: (p[2] ?? '').split(','),
    });
  }
  return out;
}

/** controller name ("memory", "" for the v2 line) -> own cgroup path */
function ownCgroups(pid: number | 'self' = 'self'): Map<string, string> {
  const m = new Map<string, string>();
  for (const line of readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n')) {
    const i = line.indexOf(':');
    const j = line.indexOf(':', i + 1);
    if (i < 0 || j < 0) continue;
    const ctrls = line.slice(i + 1, j);
    const path = line.slice(j + 1);
    if (ctrls === '') m.set('', path);
    else for (const c of ctrls.split(',')) m.set(c, path);
  }
  return m;
}

function write(path: string, value: string): void {
  writeFileSync(path, value);
}

function tryWrite(path: string, value: string): boolean {
  try {
    writeFileSync(path, value);
    return true;
  } catch {
    return false;
  }
}

/** v1 cpu.shares for a v2-scale weight (100 = 1,024, one ordinary process). */
function v1Shares(weight: number): number {
  return Math.max(2, Math.round((weight * 1024) / 100));
}

function tryRmdir(path: string): boolean {
  try {
    rmdirSync(path);
    return true;
  } catch {
    return false;
  }
}

function read(path: string): string | null {
  try {
    return readFileSync(path, 'utf8').trim();
  } catch {
    return null;
  }
}

/**
 * Child of a capsule's memory cgroup where the runner's writer processes run
 * (charged.ts): their tmpfs pages count against the capsule's limit, and the
 * per-exec sweep, which looks only at the capsule group itself, leaves them alone.
 */
export const WRITER_LEAF = 'writer';

/** Child of the runner's subtree holding the runner itself, bounded by runner_memory_mb. */
export const RUNNER_LEAF = '.runner';

/** v1: suffix of the quick lane's group, a sibling of the capsules' group (see CgroupManager.open). */
const QUICK_SUFFIX = '.quick';

/**
 * v1: suffix of the services' CPU group (the runner and the `capsule serve` that supervises it), a
 * sibling of the capsules' group (see confineRunner).
 */
const SERVICES_SUFFIX = '.services';

/** Where the runner's cgroup v2 puts its own processes (see prepareV2). */
const SUPERVISOR_LEAF = 'capsule-supervisor';

/**
 * Enables memory and pids for dir's children in one write (the kernel takes
 * both or neither), then cpu if offered (weight only, best effort).
 * WARNING: never enable pids or cpu alone in a cgroup that still has
 * processes: threaded controllers are allowed there, which makes the cgroup a
 * thread root and every new child "domain invalid" (joining it: EOPNOTSUPP).
 */
function enableControllers(dir: string): boolean {
  if (!tryWrite(join(dir, 'cgroup.subtree_control'), '+memory +pids')) return false;
  tryWrite(join(dir, 'cgroup.subtree_control'), '+cpu');
  return true;
}

export class CgroupError extends Error {}

export class CgroupManager {
  private constructor(
    readonly mode: CgroupMode,
    /** v2 base dir or v1 memory base dir of this runner's subtree. */
    private readonly memoryBase: string,
    private readonly pidsBase: string | null,
    private readonly cpuBase: string | null,
    private readonly quickBase: string | null = null,
    private readonly servicesBase: string | null = null,
    private readonly acctBase: string | null = null,
  ) {}

  /** Finds the hierarchy and prepares `<own cgroup>/<name>`; throws CgroupError with a clear message. */
  /**
   * capsulesCpuWeight: the capsules' share against the services. v1: the cpu.shares of the group
   * holding every capsule (the runner and control plane are outside it). v2: the runner's own leaf
   * is weighted above each capsule instead (capsules are its siblings).
   *
   * quickCpuWeight (v1; 0: none): the weight of the quick lane, a second group beside the
   * capsules' one where the execs of tenants light on CPU run (CapsuleManager decides). Inside
   * the capsules' group a light tenant's short command waits behind every busy tenant for that
   * group's single share; in the lane it gets its own. The lane is capped at half the node's
   * CPUs (at least one), so light tenants together can never take the whole node from the
   * services, and an exec that turns CPU-bound is moved out of it (exec.ts). v2 has no lane:
   * each capsule is already weighed directly against the services there.
   *
   * servicesCpuWeight (v1; 0: none): the weight of the services' own CPU group, made here and
   * joined by confineRunner. Left in the root group, the runner and `capsule serve` weighed what
   * the kernel gave their session (with autogroups, one nice-0 share for the session together,
   * whatever else ran in it), less than the quick lane.
   */
  static open(name: string, capsulesCpuWeight = 100, quickCpuWeight = 0, servicesCpuWeight = 0): CgroupManager {
    const mounts = readMounts();
    const own = ownCgroups();
    const v2 = mounts.find((m) => m.fstype === 'cgroup2');
    const v1For = (ctrl: string): Mount | undefined =>
      mounts.find((m) => m.fstype === 'cgroup' && m.superOpts.includes(ctrl));
    const v1Mem = v1For('memory');
    const v2Ctrls =
      v2 && existsSync(join(v2.mountPoint, 'cgroup.controllers'))
        ? readFileSync(join(v2.mountPoint, 'cgroup.controllers'), 'utf8').trim().split(/\s+/)
        : [];
    const base = (m: Mount, ownPath: string): string => {
      // Our own path is relative to the hierarchy root; the mount may show a sub-root.
      const rel = m.root !== '/' && ownPath.startsWith(m.root) ? ownPath.slice(m.root.length) : ownPath;
      return join(m.mountPoint, rel);
    };

    if (!v1Mem && v2 && v2Ctrls.includes('memory')) {
      let ownDir = base(v2, own.get('') ?? '/');
      // A restarted runner starts inside the leaf an earlier one made: its subtree is beside it.
      if (basename(ownDir) === SUPERVISOR_LEAF) ownDir = dirname(ownDir);
      const sub = join(ownDir, name);
      CgroupManager.prepareV2(ownDir, sub);
      mkdirSync(join(sub, RUNNER_LEAF), { recursive: true });
      tryWrite(
        join(sub, RUNNER_LEAF, 'cpu.weight'),
        String(Math.min(10000, Math.round((100 * 100) / capsulesCpuWeight))),
      );
      return new CgroupManager('v2', sub, null, null);
    }
    if (!v1Mem)
      throw new CgroupError(
        'no memory cgroup controller found (neither cgroup v2 with memory nor a v1 memory hierarchy)',
      );
    const mode: CgroupMode = v2 ? 'hybrid' : 'v1';
    const memBase = join(base(v1Mem, own.get('memory') ?? '/'), name);
    mkdirSync(memBase, { recursive: true });
    tryWrite(join(memBase, 'memory.use_hierarchy'), '1');
    const pidsMount = v1For('pids');
    let pidsBase: string | null = null;
    if (pidsMount) {
      pidsBase = join(base(pidsMount, own.get('pids') ?? '/'), name);
      mkdirSync(pidsBase, { recursive: true });
    }
    const cpuMount = v1For('cpu');
    // cpuacct co-mounted with cpu has its counters in the CPU groups themselves (cpuUsageMs).
    const acctMount = v1For('cpuacct');
    let acctBase: string | null = null;
    if (acctMount && acctMount !== cpuMount) {
      acctBase = join(base(acctMount, own.get('cpuacct') ?? '/'), name);
      try {
        mkdirSync(acctBase, { recursive: true });
      } catch {
        acctBase = null; // no accounting: light-tenants.ts counts wall time instead
      }
    }
    let cpuBase: string | null = null;
    let quickBase: string | null = null;
    let servicesBase: string | null = null;
    if (cpuMount) {
      let cpuOwn = base(cpuMount, own.get('cpu') ?? '/');
      // Started from a process in a runner's services' group (a restart, or a second runner beside a
      // first): this runner's groups go beside that one, not inside it.
      if (basename(cpuOwn).endsWith(SERVICES_SUFFIX)) cpuOwn = dirname(cpuOwn);
      cpuBase = join(cpuOwn, name);
      mkdirSync(cpuBase, { recursive: true });
      tryWrite(join(cpuBase, 'cpu.shares'), String(v1Shares(capsulesCpuWeight)));
      if (quickCpuWeight > 0) quickBase = CgroupManager.openQuickLane(cpuBase + QUICK_SUFFIX, quickCpuWeight);
      if (servicesCpuWeight > 0) {
        servicesBase = cpuBase + SERVICES_SUFFIX;
        mkdirSync(servicesBase, { recursive: true });
        if (!tryWrite(join(servicesBase, 'cpu.shares'), String(v1Shares(servicesCpuWeight)))) {
          tryRmdir(servicesBase);
          servicesBase = null;
        }
      }
    }
    return new CgroupManager(mode, memBase, pidsBase, cpuBase, quickBase, servicesBase, acctBase);
  }

  /** The quick lane's group (v1 cpu): weighted, and capped at half the CPUs; null if it cannot be made. */
  private static openQuickLane(dir: string, weight: number): string | null {
    try {
      mkdirSync(dir, { recursive: true });
    } catch {
      return null;
    }
    const periodUs = 20_000; // short: a throttled lane waits at most this long
    const cpus = Math.max(1, Math.floor(availableParallelism() / 2));
    const capped =
      tryWrite(join(dir, 'cpu.cfs_period_us'), String(periodUs)) &&
      tryWrite(join(dir, 'cpu.cfs_quota_us'), String(periodUs * cpus));
    // WARNING: an uncapped lane would let many light tenants together starve the services: none then.
    if (!capped || !tryWrite(join(dir, 'cpu.shares'), String(v1Shares(weight)))) {
      tryRmdir(dir);
      return null;
    }
    return dir;
  }

  /**
   * v2 "no internal processes": a non-root cgroup can delegate memory and
   * pids only while it has no member processes. When the runner's cgroup has
   * some (the runner, and `capsule serve` that spawned it), every one of them
   * moves into the leaf `<own>/capsule-supervisor` first, as systemd-nspawn
   * and docker-in-docker do; accounting above the runner's cgroup is unchanged.
   */
  private static prepareV2(ownDir: string, sub: string): void {
    const need = ['memory', 'pids'];
    const offered = (read(join(ownDir, 'cgroup.controllers')) ?? '').split(/\s+/);
    const missing = need.filter((c) => !offered.includes(c));
    if (missing.length > 0)
      throw new CgroupError(
        `the ${missing.join(' and ')} controller is not delegated to ${ownDir} (enable it in the parent's cgroup.subtree_control, e.g. systemd Delegate=yes)`,
      );
    if (!enableControllers(ownDir)) {
      const leaf = join(ownDir, SUPERVISOR_LEAF);
      mkdirSync(leaf, { recursive: true });
      // A few rounds: a process may fork while the others move.
      for (let round = 0; round < 20 && !enableControllers(ownDir); round++)
        for (const pid of (read(join(ownDir, 'cgroup.procs')) ?? '').split('\n'))
          if (pid) tryWrite(join(leaf, 'cgroup.procs'), pid); // fails only for a process that exited
      if (!enableControllers(ownDir))
        throw new CgroupError(`cannot enable memory and pids controllers in ${ownDir}: processes keep appearing in it`);
    }
    mkdirSync(sub, { recursive: true });
    if (!enableControllers(sub)) throw new CgroupError(`cannot enable memory and pids controllers in ${sub}`);
  }

  /**
   * Makes the capsule's groups. WARNING: mkdir and rmdir in a cgroup hierarchy wait for the
   * kernel's one cgroup lock, which every process move on the node takes (held long under a fork
   * storm: 120-520 ms measured in the soak), so they run on libuv's pool, never on the caller's loop.
   */
  async create(id: string, limits: CgroupLimits): Promise<CapsuleCgroupPaths> {
    if (this.mode === 'v2') {
      const dir = join(this.memoryBase, id);
      await mkdir(dir);
      write(join(dir, 'memory.max'), String(limits.memoryBytes));
      // Absent only without swap accounting in the kernel; present, it must take the 0.
      if (existsSync(join(dir, 'memory.swap.max'))) write(join(dir, 'memory.swap.max'), '0');
      write(join(dir, 'memory.oom.group'), '1');
      write(join(dir, 'pids.max'), String(limits.pidsMax));
      if (existsSync(join(dir, 'cpu.weight'))) write(join(dir, 'cpu.weight'), String(limits.cpuWeight));
      await mkdir(join(dir, WRITER_LEAF));
      return { mode: 'v2', memory: dir, pids: null, cpu: null };
    }
    const mem = join(this.memoryBase, id);
    const pids = this.pidsBase ? join(this.pidsBase, id) : null;
    const cpu = this.cpuBase ? join(this.cpuBase, id) : null;
    const quick = this.quickBase ? join(this.quickBase, id) : null;
    const acct = this.acctBase ? join(this.acctBase, id) : null;
    // The hierarchies side by side: each mkdir is a trip through the pool and a wait for the lock.
    await Promise.all([
      mkdir(mem).then(() => mkdir(join(mem, WRITER_LEAF))),
      ...[pids, cpu, quick, acct].filter((d): d is string => d !== null).map((d) => mkdir(d)),
    ]);
    write(join(mem, 'memory.limit_in_bytes'), String(limits.memoryBytes));
    // memsw = memory+swap; equal to the memory limit means no swap at all.
    if (existsSync(join(mem, 'memory.memsw.limit_in_bytes')))
      write(join(mem, 'memory.memsw.limit_in_bytes'), String(limits.memoryBytes));
    tryWrite(join(mem, 'memory.swappiness'), '0');
    tryWrite(join(mem, WRITER_LEAF, 'memory.swappiness'), '0');
    if (pids) write(join(pids, 'pids.max'), String(limits.pidsMax));
    if (cpu) tryWrite(join(cpu, 'cpu.shares'), String(v1Shares(limits.cpuWeight)));
    return { mode: this.mode, memory: mem, pids, cpu, quick, acct };
  }

  /** Sets a live capsule's CPU weight (v2 scale; v1 cpu.shares = weight x 1024 / 100); best effort. */
  setCpuWeight(paths: CapsuleCgroupPaths, weight: number): void {
    const w = weightFile(paths);
    if (w) tryWrite(w.file, String(Math.max(w.min, Math.round(paths.mode === 'v2' ? weight : (weight * 1024) / 100))));
  }

  /**
   * Moves the runner into `<subtree>/.runner` bounded to runnerBytes and
   * bounds the whole subtree (runner plus every capsule) to totalBytes, so
   * neither the runner nor the capsules together can take more than the node
   * was configured to give. Returns a function that moves the runner back to
   * the cgroup it came from (graceful stop, so the subtree can be removed).
   *
   * v1 with a services' CPU group (see open): the runner joins it, and so does `supervisor` (the
   * `capsule serve` that started it) if it shares the runner's CPU group; both go back on return.
   */
  confineRunner(runnerBytes: number, totalBytes: number, supervisor: number | null = null): () => void {
    const origin = ownCgroups().get(this.mode === 'v2' ? '' : 'memory') ?? '/';
    const services = this.joinServices(supervisor);
    const originProcs = join(this.memoryBase, '..', 'cgroup.procs');
    const leaf = join(this.memoryBase, RUNNER_LEAF);
    mkdirSync(leaf, { recursive: true });
    if (this.mode === 'v2') {
      write(join(leaf, 'memory.max'), String(runnerBytes));
      if (existsSync(join(leaf, 'memory.swap.max'))) tryWrite(join(leaf, 'memory.swap.max'), '0');
      tryWrite(join(this.memoryBase, 'memory.max'), String(totalBytes));
    } else {
      write(join(leaf, 'memory.limit_in_bytes'), String(runnerBytes));
      tryWrite(join(leaf, 'memory.swappiness'), '0');
      // The parent's limit may only be lowered below its children's usage by the kernel's reclaim; best effort.
      tryWrite(join(this.memoryBase, 'memory.limit_in_bytes'), String(totalBytes));
    }
    write(join(leaf, 'cgroup.procs'), String(process.pid));
    return () => {
      // The origin is the directory above our subtree unless the runner started elsewhere (v2 supervisor leaf).
      const back =
        basename(origin) === SUPERVISOR_LEAF
          ? join(this.memoryBase, '..', SUPERVISOR_LEAF, 'cgroup.procs')
          : originProcs;
      if (tryWrite(back, String(process.pid))) tryRmdir(leaf);
      services();
    };
  }

  /** Moves the runner (and its supervisor, see confineRunner) into the services' CPU group; returns the move back. */
  private joinServices(supervisor: number | null): () => void {
    const group = this.servicesBase;
    if (!group) return () => undefined;
    const own = ownCgroups().get('cpu');
    let supervisorShares = false;
    try {
      supervisorShares = supervisor !== null && own !== undefined && ownCgroups(supervisor).get('cpu') === own;
    } catch {
      /* the supervisor is gone */
    }
    // v1 cgroup.procs moves every thread of the process (libuv's pool and the workers included).
    const pids = [process.pid, ...(supervisorShares ? [supervisor!] : [])];
    const moved = pids.filter((pid) => tryWrite(join(group, 'cgroup.procs'), String(pid)));
    // Started in the services' group of a runner that died (another name): removed once empty.
    const left =
      own !== undefined && basename(own).endsWith(SERVICES_SUFFIX) ? join(dirname(group), basename(own)) : null;
    if (left !== null && left !== group) tryRmdir(left);
    return () => {
      // Not taken from a group another runner moved it into since.
      const here = new Set((read(join(group, 'cgroup.procs')) ?? '').split('\n'));
      for (const pid of moved) if (here.has(String(pid))) tryWrite(join(dirname(group), 'cgroup.procs'), String(pid));
      tryRmdir(group); // fails while a process started from the services (the spawner) is still in it
    };
  }

  /** Bytes the runner itself is charged now (its leaf), or null when unreadable. */
  runnerUsageBytes(): number | null {
    const v = read(join(this.memoryBase, RUNNER_LEAF, this.mode === 'v2' ? 'memory.current' : 'memory.usage_in_bytes'));
    return v === null ? null : Number(v);
  }

  /** Existing capsule group directories under this runner's subtree (for recovery). */
  listGroups(): string[] {
    try {
      return readdirSync(this.memoryBase, { withFileTypes: true })
        .filter((d) => d.isDirectory() && d.name !== RUNNER_LEAF)
        .map((d) => d.name);
    } catch {
      return [];
    }
  }

  /** Removes this runner's (empty) subtree directories; used at graceful stop. */
  removeSubtree(): void {
    tryRmdir(join(this.memoryBase, RUNNER_LEAF)); // empty once the runner left it (or died)
    for (const d of [this.memoryBase, this.pidsBase, this.cpuBase, this.quickBase, this.servicesBase, this.acctBase]) {
      if (!d) continue;
      try {
        rmdirSync(d);
      } catch {
        /* not empty (a capsule survived) or gone */
      }
    }
  }

  pathsFor(id: string): CapsuleCgroupPaths {
    if (this.mode === 'v2') return { mode: 'v2', memory: join(this.memoryBase, id), pids: null, cpu: null };
    return {
      mode: this.mode,
      memory: join(this.memoryBase, id),
      pids: this.pidsBase ? join(this.pidsBase, id) : null,
      cpu: this.cpuBase ? join(this.cpuBase, id) : null,
      quick: this.quickBase ? join(this.quickBase, id) : null,
      acct: this.acctBase ? join(this.acctBase, id) : null,
    };
  }
}

/** v1: the capsule's CPU group, in the quick lane if asked and there is one. */
function cpuDir(p: CapsuleCgroupPaths, quick: boolean): string | null {
  return (quick && p.quick) || p.cpu;
}

/** Files a new process writes its pid to, before exec, to join every controller (its CPU in the quick lane if asked and there is one). */
export function procsFiles(p: CapsuleCgroupPaths, quick = false): string[] {
  return [p.memory, p.pids, cpuDir(p, quick), p.acct]
    .filter((d): d is string => !!d)
    .map((d) => join(d, 'cgroup.procs'));
}

/**
 * Moves the capsule's processes into the quick lane's CPU group or out of it (v1; a no-op
 * without a lane). A few rounds: a process may fork while the others move; a child forked
 * meanwhile is found in the next one. Asynchronous: a move waits for the kernel's cgroup lock
 * (see create), and the exec thread serves every tenant.
 */
export async function placeCpu(p: CapsuleCgroupPaths, quick: boolean): Promise<void> {
  if (!p.quick || !p.cpu) return;
  const [from, to] = quick ? [p.cpu, p.quick] : [p.quick, p.cpu];
  for (let round = 0; round < 5; round++) {
    const pids = (await readFile(join(from, 'cgroup.procs'), 'utf8').catch(() => '')).split('\n').filter(Boolean);
    if (pids.length === 0) return;
    // A write fails only for a process that exited.
    for (const pid of pids) await writeFile(join(to, 'cgroup.procs'), pid).catch(() => undefined);
  }
}

export function groupPids(p: CapsuleCgroupPaths): number[] {
  const seen = new Set<number>();
  for (const d of [p.memory, p.pids]) {
    if (!d) continue;
    try {
      for (const s of readFileSync(join(d, 'cgroup.procs'), 'utf8').split('\n')) if (s) seen.add(Number(s));
    } catch {
      /* group gone */
    }
  }
  return [...seen];
}

/**
 * CPU time the capsule's processes have used, in milliseconds, exited ones included (v2:
 * cpu.stat usage_usec; v1: cpuacct.usage of its accounting group, or of its CPU groups where
 * cpuacct is mounted with cpu); null where the kernel does not account it.
 */
export function cpuUsageMs(p: CapsuleCgroupPaths): number | null {
  if (p.mode === 'v2') {
    const m = /^usage_usec (\d+)$/m.exec(read(join(p.memory, 'cpu.stat')) ?? '');
    return m ? Number(m[1]) / 1000 : null;
  }
  let ns: number | null = null;
  for (const d of p.acct ? [p.acct] : [p.cpu, p.quick]) {
    const v = d ? read(join(d, 'cpuacct.usage')) : null;
    if (v) ns = (ns ?? 0) + Number(v); // read() trims: empty means nothing to count
  }
  return ns === null ? null : ns / 1e6;
}

/** The file holding a capsule's CPU weight and its smallest value (v2 cpu.weight, v1 cpu.shares); null without a cpu controller. */
function weightFile(p: CapsuleCgroupPaths): { file: string; min: number } | null {
  if (p.mode === 'v2') return { file: join(p.memory, 'cpu.weight'), min: 1 };
  return p.cpu ? { file: join(p.cpu, 'cpu.shares'), min: 2 } : null;
}

/**
 * Milliseconds the group's live processes have spent running or waiting to run, summed over
 * them (/proc/<pid>/schedstat). Time waiting for a CPU counts: on a busy node a spinning
 * process gets a small share of a core, but it is runnable all the time. A process that exited
 * drops out of the sum, so callers take differences (a drop counts as nothing).
 */
export function groupRunnableMs(p: CapsuleCgroupPaths): number {
  let ns = 0;
  for (const pid of groupPids(p)) {
    const s = read(`/proc/${pid}/schedstat`);
    if (s === null) continue;
    const [run, wait] = s.split(' ');
    ns += Number(run) + Number(wait);
  }
  return ns / 1e6;
}

/**
 * Lowers a capsule's CPU weight while its exec runs CPU-bound and puts back what it found (a
 * capsule's execs run one at a time: capsule.ts queues them). The weight stays relative: a
 * tenant's capsules keep the split CapsuleManager gave them, all divided alike. Best effort:
 * without a cpu controller there is nothing to lower.
 */
export class CpuDemotion {
  readonly #w: { file: string; min: number } | null;
  #normal: string | null = null;
  #lowered: string | null = null;

  constructor(
    p: CapsuleCgroupPaths,
    private readonly divisor: number,
  ) {
    this.#w = weightFile(p);
  }

  /** Lowers the weight; again if the runner re-weighed the capsule since (its value becomes the one to restore). */
  lower(): void {
    if (this.#w === null) return;
    const now = read(this.#w.file);
    if (now === null || now === this.#lowered) return;
    const lowered = String(Math.max(this.#w.min, Math.round(Number(now) / this.divisor)));
    if (tryWrite(this.#w.file, lowered)) {
      this.#normal = now;
      this.#lowered = lowered;
    }
  }

  /** Puts the weight back, unless someone set another since (destroy raises a dying capsule's). */
  restore(): void {
    if (this.#w === null || this.#normal === null) return;
    if (read(this.#w.file) === this.#lowered) tryWrite(this.#w.file, this.#normal);
    this.#normal = null;
    this.#lowered = null;
  }
}

/** OOM kills counted by the kernel for this group so far. */
export function oomKills(p: CapsuleCgroupPaths): number {
  try {
    const text = readFileSync(join(p.memory, p.mode === 'v2' ? 'memory.events' : 'memory.oom_control'), 'utf8');
    const m = /^oom_kill (\d+)$/m.exec(text);
    return m ? Number(m[1]) : 0;
  } catch {
    return 0;
  }
}

/**
 * Forks the kernel refused because the group was at pids.max, counted so far
 * (`pids.events` "max": v2 in the capsule's group, v1 in its pids group).
 */
export function processLimitHits(p: CapsuleCgroupPaths): number {
  const dir = p.mode === 'v2' ? p.memory : p.pids;
  if (!dir) return 0;
  const m = /^max (\d+)$/m.exec(read(join(dir, 'pids.events')) ?? '');
  return m ? Number(m[1]) : 0;
}

/** Sends sig to every process of the group except `spare` (v2 SIGKILL uses cgroup.kill). */
export function signalGroup(
  p: CapsuleCgroupPaths,
  sig: NodeJS.Signals,
  spare: number | null = null,
  subtree = true,
): void {
  // cgroup.kill takes the writer leaf too; subtree=false spares it (one signal per member instead).
  if (p.mode === 'v2' && sig === 'SIGKILL' && subtree && tryWrite(join(p.memory, 'cgroup.kill'), '1')) return;
  for (const pid of groupPids(p)) {
    if (pid === spare) continue;
    try {
      process.kill(pid, sig);
    } catch {
      /* already gone */
    }
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

/**
 * SIGKILLs the group until it is empty; returns whether it emptied within the
 * deadline. writers=false (the per-exec sweep) spares the writer leaf: an
 * upload may be copying bytes in beside the exec.
 */
export async function killGroup(p: CapsuleCgroupPaths, deadlineMs = 2000, withWriters = true): Promise<boolean> {
  const end = Date.now() + deadlineMs;
  const writersOf = (): number[] => (withWriters ? writerPidsOf(p) : []);
  // A killed process that was only waiting (the usual case) is gone within a fraction of a
  // millisecond: look again after one turn of the loop, then every 1 and 2 ms.
  for (let round = 0; ; round++) {
    const writers = writersOf();
    if (groupPids(p).length === 0 && writers.length === 0) return true;
    signalGroup(p, 'SIGKILL', null, withWriters);
    for (const pid of writers) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    if (Date.now() > end) return groupPids(p).length === 0 && writersOf().length === 0;
    await (round === 0 ? new Promise((r) => setImmediate(r)) : sleep(round < 3 ? 1 : 2));
  }
}

function writerLeafProcs(p: CapsuleCgroupPaths): string {
  return join(p.memory, WRITER_LEAF, 'cgroup.procs');
}

/**
 * Files a writer (charged.ts) joins: the capsule's writer leaf (memory; v2: cpu too, below the
 * capsule) and on v1 the capsule's CPU group (its quick lane's if asked): the bytes it copies for
 * a tenant are that tenant's CPU, not the services'.
 */
export function writerProcsFiles(p: CapsuleCgroupPaths, quick = false): string[] {
  // Not the accounting group (cpuUsageMs): what counts there is an exec's CPU, and one join fewer
  // is a shorter start for the upload that waits on this writer.
  const cpu = cpuDir(p, quick);
  return [writerLeafProcs(p), ...(cpu ? [join(cpu, 'cgroup.procs')] : [])];
}

function writerPidsOf(p: CapsuleCgroupPaths): number[] {
  const v = read(writerLeafProcs(p));
  return v ? v.split('\n').filter(Boolean).map(Number) : [];
}

/** Removes the group's directories (must be empty). Returns whether all are gone. */
export async function removeGroup(p: CapsuleCgroupPaths): Promise<boolean> {
  let ok = true;
  for (const d of [join(p.memory, WRITER_LEAF), p.memory, p.pids, p.cpu, p.quick, p.acct]) {
    if (!d || !existsSync(d)) continue;
    let removed = false;
    for (let i = 0; i < 50 && !removed; i++) {
      try {
        await rmdir(d); // off the loop: see create
        removed = true;
      } catch {
        await sleep(5);
      }
    }
    ok &&= removed;
  }
  return ok;
}
