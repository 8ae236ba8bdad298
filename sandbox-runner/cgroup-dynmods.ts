// Every exec's wrapper moves itself into the capsule's cgroups (cgroup.procs).
// By default the kernel makes such a move wait for an RCU grace period under
// a lock shared by the whole host: 10-15 ms for the memory controller here,
// on the path of an exec that follows its capsule's creation. The cgroup2
// mount option `favordynmods` (Linux 6.0+) removes that wait at a small cost
// to every fork and exit on the host; from Linux 6.18 it switches the kernel
// to a per-process lock and cannot be turned off until reboot. The runner sets
// it at start unless `cgroup_favordynmods=0`. It changes no cgroup and no limit.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

export type DynmodsOutcome =
  | { state: 'set' | 'already'; mountPoint: string }
  | { state: 'no_cgroup2' }
  | { state: 'failed'; mountPoint: string; reason: string };

/** The host's cgroup2 mount and whether it has favordynmods, from /proc/self/mountinfo text. */
export function cgroup2Mount(mountinfo: string): { mountPoint: string; favored: boolean } | null {
  for (const line of mountinfo.split('\n')) {
    const [pre, post] = line.split(' - ');
    const p = post?.split(' ');
    if (!pre || p?.[0] !== 'cgroup2') continue;
    return {
      mountPoint: (pre.split(' ')[4] ?? '').replace(/\\040/g, ' '),
      favored: (p[2] ?? '').split(',').includes('favordynmods'),
    };
  }
  return null;
}

/** Remounts the cgroup2 hierarchy with favordynmods when it lacks it (util-linux keeps its other options). */
export function favorDynmods(mountinfo = readFileSync('/proc/self/mountinfo', 'utf8')): DynmodsOutcome {
  const m = cgroup2Mount(mountinfo);
  if (!m) return { state: 'no_cgroup2' };
  if (m.favored) return { state: 'already', mountPoint: m.mountPoint };
  const r = spawnSync('mount', ['-o', 'remount,favordynmods', m.mountPoint], { encoding: 'utf8', timeout: 10_000 });
  if (r.status === 0) return { state: 'set', mountPoint: m.mountPoint };
  const reason = (r.error?.message ?? r.stderr ?? '').trim().split('\n')[0] || `mount exited with ${r.status}`;
  return { state: 'failed', mountPoint: m.mountPoint, reason };
}
