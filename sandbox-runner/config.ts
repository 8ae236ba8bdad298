// The runner's configuration: read ONCE at start from env and argv
// (`--key=value` overrides CAPSULE_RUNNER_KEY) into one validated object.
// Nothing else in the runner reads process.env.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { isAbsolute, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { PROC_SWAPS } from '../shared/node/swaps.js';

export interface RunnerConfig {
  socketPath: string;
  stateDir: string;
  /** Host uid/gid range handed to capsules, one id per live capsule. */
  uidBase: number;
  uidCount: number;
  /** runtime label -> read-only base image root; "default" is used when a request names none. */
  runtimes: Record<string, string>;
  seccompPolicyPath: string;
  /** Name of this runner's cgroup subtree under its own cgroup. */
  cgroupName: string;
  bounds: {
    maxCapsules: number;
    minMemoryMb: number;
    maxMemoryMb: number;
    /**
     * Upper bound of each capsule's tmpfs (input + output + tmp + app files);
     * a capsule gets storageMbFor(memory_mb, tmpfsMb).
     */
    tmpfsMb: number;
    /** Files and directories per capsule tmpfs (bounds the destroy walk). */
    tmpfsInodes: number;
    maxUploadBytes: number;
    maxReadBytes: number;
    maxOutputBytes: number; // per stream (stdout, stderr)
    maxCommandBytes: number;
    maxInputBytes: number;
    maxTimeoutMs: number;
    killGraceMs: number;
    pidsMax: number;
    cpuWeight: number;
    /**
     * Weight of all capsules together against the runner and control plane (cgroup v2 scale; v1
     * cpu.shares = weight x 1024 / 100): a tenant's CPU burst cannot queue the services behind it.
     */
    capsulesCpuWeight: number;
    /**
     * Weight of the quick lane on cgroup v1 (same scale; 0: none), where the execs of tenants light
     * on CPU run beside the capsules' group instead of inside it (cgroup.ts CgroupManager.open).
     */
    quickCpuWeight: number;
    /**
     * Weight of the runner and control plane on cgroup v1 (same scale; 0: left where they started),
     * in a CPU group of their own beside the capsules' group and the quick lane.
     */
    servicesCpuWeight: number;
  };
  /**
   * Memory the node gives capsules in total (MB): a capsule is admitted only
   * while the sum of live capsules' memory_mb (their files included, see
   * storageMbFor) plus its own fits. Default: 80 % of MemTotal less the runner's bound.
   */
  nodeMemoryMb: number;
  /** Bound of the runner's own memory cgroup (MB). */
  runnerMemoryMb: number;
  /** Exit when the parent process goes away (the runner was spawned by `capsule serve`). */
  exitWithParent: boolean;
  /**
   * Tests only: run although swap is active. The runner states it in host
   * facts (swap_active: true) and prints a warning; it never hides it.
   */
  allowSwapForTests: boolean;
  /**
   * The swap table read at start and for host facts; /proc/swaps unless a
   * test points it at a fake one (the runner then prints a warning).
   */
  procSwaps: string;
  /**
   * Wipe sparse files at their data extents through the python3 helper
   * (default). false: the fallback a host without python3 takes (whole-file
   * writes that can meet ENOSPC, stated in the evidence); tests use it.
   */
  wipeSparseHelper: boolean;
  /** Set the cgroup2 mount option favordynmods at start (cgroup-dynmods.ts): fast cgroup moves. */
  cgroupFavorDynmods: boolean;
  /** CAPSULE_RUNNER_LISTEN=host:port with CAPSULE_RUNNER_TLS_CA/_CERT/_KEY: the mutual-TLS listener; null = Unix socket only. */
  listen: { host: string; port: number; ca: string; cert: string; key: string } | null;
  /** CAPSULE_RUNNER_NODE_ID (default: the host name): how control planes name this runner. */
  nodeId: string;
  /** CAPSULE_RUNNER_LABELS=k=v,k=v: placement labels reported to control planes. */
  labels: Record<string, string>;
}

export class ConfigError extends Error {}

/** host:port (IPv6 in brackets); port 0 picks a free one (tests). */
function parseListen(raw: string): { host: string; port: number } {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s]+)):(\d{1,5})$/.exec(raw);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port > 65535) throw new ConfigError(`listen: expected host:port, got ${JSON.stringify(raw)}`);
  return { host: (m[1] ?? m[2])!, port };
}

function readPem(m: Map<Key, string>, k: Key, marker: RegExp): string {
  const path = m.get(k);
  if (!path) throw new ConfigError(`${k}: required with listen (env CAPSULE_RUNNER_${k.toUpperCase()})`);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(`${k}: cannot read ${path}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
  }
  if (!marker.test(text)) throw new ConfigError(`${k}: ${path} holds no PEM block of the expected type`);
  return text;
}

function listenConfig(m: Map<Key, string>): RunnerConfig['listen'] {
  const raw = m.get('listen');
  if (raw === undefined) {
    for (const k of ['tls_ca', 'tls_cert', 'tls_key'] as const)
      if (m.has(k)) throw new ConfigError(`${k}: only with listen (the Unix socket needs no TLS)`);
    return null;
  }
  return {
    ...parseListen(raw),
    ca: readPem(m, 'tls_ca', /-----BEGIN CERTIFICATE-----/),
    cert: readPem(m, 'tls_cert', /-----BEGIN CERTIFICATE-----/),
    key: readPem(m, 'tls_key', /-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----/),
  };
}

function labelsOf(raw: string | undefined): Record<string, string> {
  const out: Record<string, string> = {};
  if (raw === undefined) return out;
  for (const part of raw.split(',')) {
    const [k, v, ...rest] = part.split('=');
    if (
      !k ||
      v === undefined ||
      rest.length > 0 ||
      !/^[a-z0-9][a-z0-9._/-]{0,62}$/.test(k) ||
      !/^[A-Za-z0-9._-]{0,63}$/.test(v)
    )
      throw new ConfigError(`labels: expected key=value[,key=value], got ${JSON.stringify(part)}`);
    out[k] = v;
  }
  return out;
}

const KEYS = [
  'socket',
  'listen',
  'tls_ca',
  'tls_cert',
  'tls_key',
  'node_id',
  'labels',
  'state_dir',
  'uid_base',
  'uid_count',
  'runtimes',
  'seccomp_policy',
  'cgroup_name',
  'max_capsules',
  'min_memory_mb',
  'max_memory_mb',
  'tmpfs_mb',
  'tmpfs_inodes',
  'max_upload_bytes',
  'max_read_bytes',
  'max_output_bytes',
  'max_command_bytes',
  'max_input_bytes',
  'max_timeout_ms',
  'kill_grace_ms',
  'pids_max',
  'cpu_weight',
  'capsules_cpu_weight',
  'quick_cpu_weight',
  'services_cpu_weight',
  'allow_swap_for_tests',
  'proc_swaps',
  'node_memory_mb',
  'runner_memory_mb',
  'exit_with_parent',
  'wipe_sparse_helper',
  'cgroup_favordynmods',
] as const;
type Key = (typeof KEYS)[number];

function gather(env: NodeJS.ProcessEnv, argv: string[]): Map<Key, string> {
  const m = new Map<Key, string>();
  for (const k of KEYS) {
    const v = env[`CAPSULE_RUNNER_${k.toUpperCase()}`];
    if (v !== undefined && v !== '') m.set(k, v);
  }
  for (const a of argv) {
    const match = /^--([a-z_-]+)=(.*)$/s.exec(a);
    if (!match) throw new ConfigError(`unrecognized argument ${JSON.stringify(a)} (use --key=value)`);
    const k = match[1]!.replace(/-/g, '_') as Key;
    if (!KEYS.includes(k)) throw new ConfigError(`unknown option --${match[1]}`);
    m.set(k, match[2]!);
  }
  return m;
}

function int(m: Map<Key, string>, k: Key, def: number, min: number, max: number): number {
  const raw = m.get(k);
  if (raw === undefined) return def;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new ConfigError(`${k}: must be an integer in ${min}..${max}, got ${JSON.stringify(raw)}`);
  return n;
}

function absPath(m: Map<Key, string>, k: Key, def?: string): string {
  const v = m.get(k) ?? def;
  if (v === undefined) throw new ConfigError(`${k}: required (env CAPSULE_RUNNER_${k.toUpperCase()} or --${k}=...)`);
  if (!isAbsolute(v)) throw new ConfigError(`${k}: must be an absolute path`);
  return resolve(v);
}

/**
 * Storage of a capsule: its tmpfs pages are charged to its memory cgroup, so
 * the tmpfs is at most three quarters of the memory limit. A workload that
 * fills its storage gets ENOSPC with a quarter of its memory still free to
 * handle it, never an OOM kill; memory and files share the one memory_mb bound.
 */
export function storageMbFor(memoryMb: number, tmpfsMb: number): number {
  return Math.max(1, Math.min(tmpfsMb, Math.floor((memoryMb * 3) / 4)));
}

function memTotalMb(): number {
  try {
    const m = /^MemTotal:\s+(\d+) kB$/m.exec(readFileSync('/proc/meminfo', 'utf8'));
    return m ? Math.floor(Number(m[1]) / 1024) : 0;
  } catch {
    return 0;
  }
}

const DEFAULT_POLICY = fileURLToPath(new URL('../../policies/seccomp-allowlist.yaml', import.meta.url));

export function loadConfig(env: NodeJS.ProcessEnv, argv: string[]): RunnerConfig {
  const m = gather(env, argv);
  const stateDir = absPath(m, 'state_dir', '/var/lib/capsule-runner');
  const socketPath = absPath(m, 'socket', `${stateDir}/runner.sock`);
  const uidBase = int(m, 'uid_base', 200000, 1000, 2 ** 31 - 70000);
  const uidCount = int(m, 'uid_count', 1000, 1, 65536);
  // The host prefix carries sh, python3.11 and node 20; these labels use it unless configured otherwise.
  const runtimes: Record<string, string> = {
    default: '/',
    shell: '/',
    python3: '/',
    'python3.11': '/',
    node: '/',
    node20: '/',
  };
  const rt = m.get('runtimes');
  if (rt !== undefined) {
    // label=/root,label2=/root2
    for (const part of rt.split(',')) {
      const [label, root] = part.split('=');
      if (!label || !/^[a-z0-9][a-z0-9._-]{0,63}$/.test(label) || !root || !isAbsolute(root)) {
        throw new ConfigError(`runtimes: expected label=/abs/root[,label=/abs/root], got ${JSON.stringify(part)}`);
      }
      runtimes[label] = resolve(root);
    }
  }
  const cgroupName =
    m.get('cgroup_name') ?? `capsule-runner-${createHash('sha256').update(stateDir).digest('hex').slice(0, 12)}`;
  if (!/^[A-Za-z0-9._-]{1,64}$/.test(cgroupName)) throw new ConfigError('cgroup_name: letters, digits, . _ - only');
  const swap = m.get('allow_swap_for_tests');
  if (swap !== undefined && swap !== '0' && swap !== '1') throw new ConfigError('allow_swap_for_tests: 0 or 1');
  const procSwaps = absPath(m, 'proc_swaps', PROC_SWAPS);
  if (procSwaps !== PROC_SWAPS && !existsSync(procSwaps))
    throw new ConfigError(`proc_swaps: no such file ${procSwaps}`);
  const minMemoryMb = int(m, 'min_memory_mb', 16, 4, 1 << 20);
  const total = memTotalMb();
  // An eighth of RAM for the runner itself, 256 MB to 2 GB; capsules get 80 % of RAM less that.
  const runnerMemoryMb = int(m, 'runner_memory_mb', Math.min(2048, Math.max(256, Math.floor(total / 8))), 256, 1 << 20);
  const nodeMemoryMb = int(
    m,
    'node_memory_mb',
    Math.max(minMemoryMb, Math.floor(total * 0.8) - runnerMemoryMb),
    minMemoryMb,
    1 << 24,
  );
  const parent = m.get('exit_with_parent');
  if (parent !== undefined && parent !== '0' && parent !== '1') throw new ConfigError('exit_with_parent: 0 or 1');
  const sparse = m.get('wipe_sparse_helper');
  if (sparse !== undefined && sparse !== '0' && sparse !== '1') throw new ConfigError('wipe_sparse_helper: 0 or 1');
  const dynmods = m.get('cgroup_favordynmods');
  if (dynmods !== undefined && dynmods !== '0' && dynmods !== '1') throw new ConfigError('cgroup_favordynmods: 0 or 1');
  const nodeId = m.get('node_id') ?? hostname();
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$/.test(nodeId)) throw new ConfigError('node_id: letters, digits, . _ - only');
  return {
    listen: listenConfig(m),
    nodeId,
    labels: labelsOf(m.get('labels')),
    socketPath,
    stateDir,
    uidBase,
    uidCount,
    runtimes,
    seccompPolicyPath: absPath(m, 'seccomp_policy', DEFAULT_POLICY),
    cgroupName,
    bounds: {
      maxCapsules: int(m, 'max_capsules', 256, 1, 65536),
      minMemoryMb,
      maxMemoryMb: int(m, 'max_memory_mb', 4096, minMemoryMb, 1 << 20),
      tmpfsMb: int(m, 'tmpfs_mb', 256, 1, 1 << 20),
      tmpfsInodes: int(m, 'tmpfs_inodes', 65536, 64, 1 << 24),
      maxUploadBytes: int(m, 'max_upload_bytes', 100 * 1024 * 1024, 1, 2 ** 31),
      maxReadBytes: int(m, 'max_read_bytes', 100 * 1024 * 1024, 1, 2 ** 31),
      maxOutputBytes: int(m, 'max_output_bytes', 1024 * 1024, 1024, 64 * 1024 * 1024),
      maxCommandBytes: int(m, 'max_command_bytes', 10 * 1024, 1, 1024 * 1024),
      maxInputBytes: int(m, 'max_input_bytes', 512 * 1024, 0, 64 * 1024 * 1024),
      maxTimeoutMs: int(m, 'max_timeout_ms', 24 * 3600 * 1000, 1, 2 ** 31),
      killGraceMs: int(m, 'kill_grace_ms', 500, 0, 60000),
      pidsMax: int(m, 'pids_max', 128, 8, 1 << 22),
      cpuWeight: int(m, 'cpu_weight', 100, 1, 10000),
      capsulesCpuWeight: int(m, 'capsules_cpu_weight', 100, 1, 10000),
      quickCpuWeight: int(m, 'quick_cpu_weight', 1000, 0, 10000),
      servicesCpuWeight: int(m, 'services_cpu_weight', 1000, 0, 10000),
    },
    allowSwapForTests: swap === '1',
    procSwaps,
    nodeMemoryMb,
    runnerMemoryMb,
    exitWithParent: parent === '1',
    wipeSparseHelper: sparse !== '0',
    cgroupFavorDynmods: dynmods !== '0',
  };
}
