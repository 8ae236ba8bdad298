// Start-up recovery: capsules left by a crashed runner (state records, tmpfs
// mounts, cgroups) are killed, wiped, unmounted and removed, and reported as
// lost so the control plane can mark them expired_unclean.
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import type { LostCapsule } from '../shared/runner-protocol.js';
import { groupPids, killGroup, removeGroup, type CgroupManager } from './cgroup.js';
import { CAPSULE_ID_RE, capsulesDir, readRecord, removeState } from './state-record.js';
import type { Clock, Random } from './clock.js';
import { recoverEgress } from './egress.js';
import { isMountPoint, type Mounter } from './tmpfs.js';
import { wipeAndZeroize } from './wipe.js';

export async function recoverCapsules(
  stateDir: string,
  cgroups: CgroupManager,
  mounter: Mounter,
  clock: Clock,
  random: Random,
): Promise<LostCapsule[]> {
  const dir = capsulesDir(stateDir);
  const ids = new Set<string>();
  if (existsSync(dir)) {
    for (const name of readdirSync(dir)) {
      const id = name.endsWith('.json') ? name.slice(0, -5) : name;
      if (CAPSULE_ID_RE.test(id)) ids.add(id);
    }
  }
  for (const g of cgroups.listGroups()) if (CAPSULE_ID_RE.test(g)) ids.add(g);
  const lost: LostCapsule[] = [];
  for (const id of [...ids].sort()) {
    const tmpfsDir = join(dir, id);
    const record = readRecord(tmpfsDir);
    // Recorded paths first (the runner's own cgroup may have moved), then this runner's layout.
    const paths = record?.cgroup ?? cgroups.pathsFor(id);
    const fresh = cgroups.pathsFor(id);
    const found = new Set([...groupPids(paths), ...(fresh.memory !== paths.memory ? groupPids(fresh) : [])]);
    let empty = await killGroup(paths);
    const egress = record?.egress ? await recoverEgress(record.egress) : null;
    if (fresh.memory !== paths.memory) empty = (await killGroup(fresh)) && empty;
    let wipe = null;
    const wasMounted = await isMountPoint(tmpfsDir);
    let unmounted = true;
    if (wasMounted) {
      wipe = wipeAndZeroize(tmpfsDir, random.bytes(32)).report;
      unmounted = (await mounter.unmount(tmpfsDir)).gone;
    }
    let removed = await removeGroup(paths);
    if (fresh.memory !== paths.memory) removed = (await removeGroup(fresh)) && removed;
    let stateRemoved = true;
    try {
      await removeState(tmpfsDir, unmounted);
    } catch {
      stateRemoved = false;
    }
    lost.push({
      capsule_id: id,
      recovered_at: clock.iso(),
      wipe,
      recovery: {
        processes_killed: found.size,
        cgroup_empty: empty,
        cgroup_removed: removed,
        tmpfs_was_mounted: wasMounted,
        wipe,
        tmpfs_unmounted: unmounted,
        egress,
        state_removed: stateRemoved && unmounted && !existsSync(`${tmpfsDir}.json`),
      },
    });
  }
  return lost;
}
