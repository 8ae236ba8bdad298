// Step evidence (docs/PROOF_FORMAT.md "The chain") as the runner measured it (index = step - 1).
// Every member states an observation or a measurement; where something was
// not observed the evidence says so instead of claiming it.
import type { HostFacts, StepEvidence, WipeReport } from '../shared/runner-protocol.js';
import type { SandboxObservation } from './exec.js';
import type { MountLine, NsName } from './host.js';

export interface DestroyMeasurements {
  capsuleId: string;
  host: HostFacts;
  hostNamespaces: Partial<Record<NsName, string>>;
  /** The sandbox observed at the capsule's first exec (or by the destroy probe when it never ran). */
  observations: SandboxObservation[];
  execCount: number;
  tmpfsMountBefore: MountLine | null;
  wipe: WipeReport;
  wipeRegions: number;
  wipeSkippedNonRegular: number;
  wipeErrors: string[];
  wipeHardLinksDeduplicated: number;
  wipeNotOverwritten: number;
  /** Human sentence of what was not overwritten (or did not read back); null when complete. */
  wipeReason: string | null;
  tmpfsCapacityBytes: number;
  tmpfsUsedBytes: number;
  key: { bytes: number; zeroized: boolean; readback_all_zero: boolean };
  uid: {
    host_uid: number;
    processes_after: number;
    zombies_after: number;
    processes_scanned: number;
    released: boolean;
  };
  cgroup: { mode: string; empty: boolean; removed: boolean };
  tmpfsUnmounted: boolean;
  /** The unmount was only a lazy detach (the tmpfs was busy). */
  tmpfsDetachedLazily: boolean;
  stateRemoved: boolean;
  commandWasRunning: boolean;
  /** Egress capsules: relay stopped and namespace removed; null without egress. */
  egress: { relay_stopped: boolean; netns_removed: boolean } | null;
}

const WRITABLE_OK = new Set(['/data/input', '/data/output', '/tmp']);

function namespaceStep(m: DestroyMeasurements): StepEvidence {
  const obs = m.observations.map((o) => {
    const cmp: Record<string, { capsule: string | null; host: string | null; distinct: boolean }> = {};
    for (const [ns, host] of Object.entries(m.hostNamespaces)) {
      const cap = o.namespaces[ns as NsName] ?? null;
      cmp[ns] = { capsule: cap, host: host ?? null, distinct: cap !== null && host !== undefined && cap !== host };
    }
    return { observed_at: o.at, observed_during: o.kind, namespaces: cmp };
  });
  const required: NsName[] = ['user', 'mnt', 'pid', 'uts', 'net', 'ipc'];
  return {
    method: 'procfs_verification',
    // `performed` (docs/PROOF_FORMAT.md component_proofs rule): the step measured something, not that it found what it wanted.
    performed: obs.length > 0,
    source: '/proc/<sandbox pid>/ns/* compared with the runner host namespaces',
    execs: m.execCount,
    observations: obs,
    all_required_distinct:
      obs.length > 0 && obs.every((o) => required.every((ns) => o.namespaces[ns]?.distinct === true)),
  };
}

function mountStep(m: DestroyMeasurements): StepEvidence {
  const last = m.observations[m.observations.length - 1];
  const writable = last
    ? last.mounts
        .filter((x) => !x.options.split(',').includes('ro'))
        .map((x) => ({ mount_point: x.mount_point, fstype: x.fstype }))
    : null;
  return {
    method: 'mountinfo_verification',
    performed: last !== undefined,
    source: '/proc/<sandbox pid>/mountinfo and the runner host mountinfo',
    capsule_tmpfs: m.tmpfsMountBefore
      ? {
          fstype: m.tmpfsMountBefore.fstype,
          super_options: m.tmpfsMountBefore.super_options,
          options: m.tmpfsMountBefore.options,
        }
      : null,
    sandbox_mount_count: last ? last.mounts.length : null,
    sandbox_writable_mounts: writable,
    writable_only_private_tmpfs:
      writable === null
        ? null
        : writable.every(
            (w) => WRITABLE_OK.has(w.mount_point) || w.mount_point === '/proc' || w.mount_point.startsWith('/dev'),
          ),
    note: 'writable /proc is the sandbox own procfs; /dev is the bubblewrap minimal tmpfs with null, zero, full, random, urandom, tty and a private devpts',
  };
}

export function buildEvidence(m: DestroyMeasurements): StepEvidence[] {
  // The wipe happened in full only if nothing was left unwritten and every region read back as written.
  const wipeComplete = m.wipeNotOverwritten === 0 && m.wipeErrors.length === 0 && m.wipe.readback_verified;
  const wipeReason = wipeComplete ? {} : { reason: m.wipeReason ?? 'wipe incomplete' };
  return [
    namespaceStep(m),
    mountStep(m),
    {
      method: 'dod_5220_multipass_wipe',
      performed: wipeComplete,
      ...wipeReason,
      scope:
        'every regular file present in the capsule tmpfs at destroy time, each inode once, the pages it holds (holes of sparse files hold none)',
      ...m.wipe,
      regions: m.wipeRegions,
      non_regular_skipped: m.wipeSkippedNonRegular,
      hard_links_deduplicated: m.wipeHardLinksDeduplicated,
      not_overwritten: m.wipeNotOverwritten,
      tmpfs_capacity_bytes: m.tmpfsCapacityBytes,
      tmpfs_used_bytes_before: m.tmpfsUsedBytes,
      errors: m.wipeErrors,
      command_was_running: m.commandWasRunning,
      host_swap_active: m.host.swap_active,
      host_init_on_free: m.host.init_on_free,
      not_covered:
        'pages freed before destroy (deleted files, exited processes) are returned to the kernel without runner overwrite; file names and symbolic link targets are removed with the tmpfs, not overwritten',
    },
    {
      key: 'capsule-scoped 32-byte AES-256 key held by the runner (keystream key of the random wipe pass)',
      performed: m.key.zeroized,
      key_bytes: m.key.bytes,
      zeroized: m.key.zeroized,
      readback_all_zero: m.key.readback_all_zero,
      note: 'the control plane destroys its proof signing key; this step covers the runner-held capsule key',
    },
    {
      method: 'credential_incineration',
      performed: m.uid.processes_scanned > 0,
      host_uid: m.uid.host_uid,
      live_processes_with_uid_after: m.uid.processes_after,
      exited_processes_awaiting_host_reap: m.uid.zombies_after,
      processes_scanned: m.uid.processes_scanned,
      uid_released: m.uid.released,
    },
    {
      method: 'merkle_tree_verification',
      performed: wipeComplete,
      ...wipeReason,
      tree: 'RFC 6962 SHA-512 over the read-back zero state of every wiped region (regions of at most 1 MiB of each file data, a sparse file by its data extents; files in path byte order, each inode once)',
      regions: m.wipeRegions,
      bytes: m.wipe.bytes_overwritten,
      zero_state_root: m.wipe.zero_state_root,
      readback_verified: m.wipe.readback_verified,
    },
    null,
    {
      method: 'capsule_lifecycle_verification',
      cgroup_mode: m.cgroup.mode,
      cgroup_empty: m.cgroup.empty,
      cgroup_removed: m.cgroup.removed,
      tmpfs_unmounted: m.tmpfsUnmounted,
      // true: busy, so only detached (MNT_DETACH); the tmpfs lives on until its last holder closes it
      tmpfs_detached_lazily: m.tmpfsDetachedLazily,
      uid_released: m.uid.released,
      state_removed: m.stateRemoved,
      egress_relay_stopped: m.egress ? m.egress.relay_stopped : null,
      egress_netns_removed: m.egress ? m.egress.netns_removed : null,
      host_swap_active: m.host.swap_active,
      host_init_on_free: m.host.init_on_free,
    },
  ];
}
