// Start-up recovery: capsules left by a crashed runner (state records, tmpfs
// mounts, cgroups) are killed, wiped, unmounted and removed, and reported as
// lost so the control plane can mark them expired_unclean.
import { existsSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { LostCapsule } from '../shared/runner-protocol.js';
import { killGroup, removeGroup, type CgroupManager } from './cgroup.js';
import { CAPSULE_ID_RE, capsulesDir, type CapsuleRecord } from './capsule.js';
import type { Clock, Random } from './clock.js';
import { recoverEgress } from './egress.js';
import { isMounted, type Mounter } from './tmpfs.js';
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
    let record: CapsuleRecord | null = null;
    try {
      record = JSON.parse(readFileSync(`${tmpfsDir}.json`, 'utf8')) as CapsuleRecord;
    } catch {
      record = null;
    }
    // Recorded paths first (the runner's own cgroup may have moved), then this runner's layout.
    const paths = record?.cgroup ?? cgroups.pathsFor(id);
    await killGroup(paths);
    if (record?.egress) await recoverEgress(record.egress);
    const fresh = cgroups.pathsFor(id);
    if (fresh.memory !== paths.memory) await killGroup(fresh);
    let wipe = null;
    if (isMounted(tmpfsDir)) {
      wipe = wipeAndZeroize(tmpfsDir, random.bytes(32)).report;
      await mounter.unmount(tmpfsDir);
    }
    await removeGroup(paths);
    if (fresh.memory !== paths.memory) await removeGroup(fresh);
    if (!isMounted(tmpfsDir)) rmSync(tmpfsDir, { recursive: true, force: true });
    rmSync(`${tmpfsDir}.json`, { force: true });
    lost.push({ capsule_id: id, recovered_at: clock.iso(), wipe });
  }
  return lost;
}
