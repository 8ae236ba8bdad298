// Host facts and host-side observations (procfs, mountinfo), measured, never assumed.
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { release } from 'node:os';
import { activeSwaps } from '../shared/node/swaps.js';
import type { HostFacts } from '../shared/runner-protocol.js';
import type { CgroupMode } from './cgroup.js';

export const NAMESPACES = ['user', 'mnt', 'pid', 'uts', 'net', 'ipc', 'cgroup'] as const;
export type NsName = (typeof NAMESPACES)[number];

/** Whether the swap table (procSwaps: /proc/swaps unless a test configures a fake) lists an area; unreadable counts as active. */
export function swapActive(procSwaps: string): boolean {
  try {
    return activeSwaps(procSwaps).length > 0;
  } catch {
    return true;
  }
}

/** init_on_free from the kernel command line; null when not stated there (compiled-in default unreadable). */
export function initOnFree(): boolean | null {
  try {
    const m = /(?:^|\s)init_on_free=(\S+)/.exec(readFileSync('/proc/cmdline', 'utf8'));
    if (!m) return null;
    return ['1', 'on', 'y', 'yes', 'true'].includes(m[1]!.toLowerCase());
  } catch {
    return null;
  }
}

export function bwrapVersion(): string | null {
  const r = spawnSync('bwrap', ['--version'], { encoding: 'utf8' });
  if (r.status !== 0) return null;
  return r.stdout.trim().replace(/^bubblewrap\s+/, '');
}

export function hostFacts(mode: CgroupMode, bwrap: string, procSwaps: string): HostFacts {
  return {
    kernel: release(),
    cgroup_mode: mode,
    swap_active: swapActive(procSwaps),
    init_on_free: initOnFree(),
    bwrap_version: bwrap,
  };
}

/** "type:[inode]" link targets of a process's namespaces; missing ones are omitted. */
export function nsInodes(pid: number | 'self'): Partial<Record<NsName, string>> {
  const out: Partial<Record<NsName, string>> = {};
  for (const ns of NAMESPACES) {
    try {
      out[ns] = readlinkSync(`/proc/${pid}/ns/${ns}`);
    } catch {
      /* gone or unsupported */
    }
  }
  return out;
}

export interface MountLine {
  mount_point: string;
  fstype: string;
  source: string;
  options: string;
  super_options: string;
}

export function parseMountinfo(text: string): MountLine[] {
  const out: MountLine[] = [];
  for (const line of text.split('\n')) {
    const [pre, post] = line.split(' - ');
    if (!pre || !post) continue;
    const f = pre.split(' ');
    const p = post.split(' ');
    out.push({
      mount_point: (f[4] ?? '').replace(/\\040/g, ' '),
      options: f[5] ?? '',
      fstype: p[0] ?? '',
      source: p[1] ?? '',
      super_options: p[2] ?? '',
    });
  }
  return out;
}

/**
 * A process's mount table, read off the calling thread's loop: reading mountinfo waits for the
 * host's mount lock, which every sandbox start and exit takes (tens of ms while capsules churn).
 * Empty when the process is gone.
 */
export async function mountinfoOfAsync(pid: number | 'self'): Promise<MountLine[]> {
  try {
    return parseMountinfo(await readFile(`/proc/${pid}/mountinfo`, 'utf8'));
  } catch {
    return [];
  }
}

/**
 * Processes on the host whose owner (euid of /proc/<pid>) is uid; also how many
 * were scanned. Zombies (exited, waiting for the host init to reap them: they
 * hold no memory, files or credentials) are counted apart.
 */
export function processesOwnedBy(uid: number): { pids: number[]; zombies: number; scanned: number } {
  const pids: number[] = [];
  let zombies = 0;
  let scanned = 0;
  for (const name of readdirSync('/proc')) {
    const c = name.charCodeAt(0);
    if (c < 48 || c > 57) continue;
    scanned++;
    try {
      if (statSync(`/proc/${name}`).uid !== uid) continue;
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) === 'Z') zombies++;
      else pids.push(Number(name));
    } catch {
      /* exited */
    }
  }
  return { pids, zombies, scanned };
}
