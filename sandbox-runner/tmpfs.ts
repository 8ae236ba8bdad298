// The capsule's private, size-bounded tmpfs on the host, mounted with the
// util-linux mount/umount tools (the runner stays free of native code).
import { spawnSync } from 'node:child_process';
import { mountinfoOf } from './host.js';

export class TmpfsError extends Error {}

export function mountTmpfs(dir: string, sizeMb: number): void {
  const r = spawnSync('mount', ['-t', 'tmpfs', '-o', `size=${sizeMb}m,mode=0711,nosuid,nodev`, 'capsule-tmpfs', dir], { encoding: 'utf8' });
  if (r.status !== 0) throw new TmpfsError(`mount tmpfs at ${dir} failed: ${(r.stderr || '').trim()}`);
}

export function isMounted(dir: string): boolean {
  return mountinfoOf('self').some((m) => m.mount_point === dir);
}

/** Unmounts dir (lazily if still busy); returns whether it is gone from our mount table. */
export function unmountTmpfs(dir: string): boolean {
  let r = spawnSync('umount', [dir], { encoding: 'utf8' });
  if (r.status !== 0 && isMounted(dir)) r = spawnSync('umount', ['-l', dir], { encoding: 'utf8' });
  return !isMounted(dir);
}
