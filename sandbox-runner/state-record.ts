// The on-disk state record of a capsule: written before anything else is made
// for it, updated as the egress layer starts, removed last by teardown; what
// recovery reads after a crash to find and wipe what a dead runner left.
import { readFileSync, writeFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { CapsuleCgroupPaths } from './cgroup.js';
import type { EgressState } from './egress.js';

export const CAPSULE_ID_RE = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/;

/** What a state record on disk holds: enough for recovery after a crash. */
export interface CapsuleRecord {
  capsule_id: string;
  host_uid: number;
  tmpfs_dir: string;
  cgroup: CapsuleCgroupPaths;
  created_at: string;
  egress?: EgressState;
}

/** The directory of tmpfs mount points and their `<id>.json` records. */
export function capsulesDir(stateDir: string): string {
  return join(stateDir, 'capsules');
}

/** A capsule's tmpfs mount point; its record sits beside it. */
export function tmpfsDirOf(stateDir: string, capsuleId: string): string {
  return join(capsulesDir(stateDir), capsuleId);
}

const recordPath = (tmpfsDir: string): string => `${tmpfsDir}.json`;

/** Written (root-only) at each step that adds something recovery must undo. */
export function writeRecord(record: CapsuleRecord): void {
  writeFileSync(recordPath(record.tmpfs_dir), JSON.stringify(record), { mode: 0o600 });
}

/** The record of the capsule at `tmpfsDir`; null when absent or unreadable (recovery then uses the layout). */
export function readRecord(tmpfsDir: string): CapsuleRecord | null {
  try {
    return JSON.parse(readFileSync(recordPath(tmpfsDir), 'utf8')) as CapsuleRecord;
  } catch {
    return null;
  }
}

/**
 * Removes the capsule's state: its tmpfs mount point (when unmounted) and its record; throws only
 * on an unexpected error (a missing one is fine). Asynchronous: removing a directory that was a
 * mount point waits for the host's mount lock, tens of ms while capsules start and exit.
 */
export async function removeState(tmpfsDir: string, unmounted: boolean): Promise<void> {
  if (unmounted) await rm(tmpfsDir, { recursive: true, force: true });
  await rm(recordPath(tmpfsDir), { force: true });
}
