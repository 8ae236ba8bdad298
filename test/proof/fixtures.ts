// A realistic record input for emit tests.
import type { RecordInput, PartialRecordInput } from '../../shared/proof/index.js';

export function recordInput(): RecordInput {
  return {
    capsule_id: 'cap_7kq2m9x4c8w1r5t3v6y0z2b4',
    created_at: '2026-11-21T22:00:00.000000Z',
    destroyed_at: '2026-11-21T22:05:00.123456Z',
    evidence: [
      { performed: true, namespaces: { mnt: 4026532301, pid: 4026532302, net: 4026532303, user: 4026532300 } },
      { performed: true, mounts: ['/ tmpfs', '/data tmpfs'], host_paths_visible: 0 },
      {
        performed: true,
        bytes_overwritten: 1048576,
        passes: ['zeros', 'ones', 'random'],
        readback_verified: true,
        swap_active: false,
        init_on_free: null,
      },
      { performed: true, keys_zeroized: 1 },
      { performed: false, note: 'no credentials were injected' },
      { performed: true, zero_state_root: 'sha512:' + 'ab'.repeat(64) },
      { sealed_events: 3 },
      { cgroup_removed: true, processes_left: 0 },
    ],
    activity: [
      {
        seq: 1,
        type: 'CapsuleStarted',
        at: '2026-11-21T22:00:00.000000Z',
        data_classification: 'PHI',
        jurisdiction: 'EU',
        region: 'local',
      },
      {
        seq: 2,
        type: 'FileUploaded',
        at: '2026-11-21T22:01:00.000000Z',
        filename: 'in.csv',
        sha512: 'sha512:' + 'cd'.repeat(64),
        size_bytes: 200,
        direction: 'in',
      },
      { seq: 3, type: 'DestructionInitiated', at: '2026-11-21T22:05:00.000000Z' },
    ],
    capsule_context: { jurisdiction: 'EU', data_classification: 'PHI' },
    termination: { trigger: 'customer_request', command_was_running: false },
    regulatory_context: {
      notice: 'Reference mapping only. Not a compliance certification.',
      framework_version: '2026-08',
      jurisdiction: 'EU',
      mappings: [
        {
          step: 3,
          subsystem: 'eee_memory',
          frameworks: [
            { regulation: 'GDPR', provision: 'Art. 17', description: 'Right to erasure', relationship: 'related_to' },
          ],
        },
      ],
    },
    internal: { account_id: 'acct_123', runner_node: 'node-a' },
  };
}

export function partialInput(): PartialRecordInput {
  return {
    capsule_id: 'cap_7kq2m9x4c8w1r5t3v6y0z2b4',
    created_at: '2026-11-21T22:00:00.000000Z',
    reason: 'capsule_state_lost_on_restart',
    activity: [
      {
        seq: 1,
        type: 'CapsuleStarted',
        at: '2026-11-21T22:00:00.000000Z',
        data_classification: 'PHI',
        jurisdiction: 'EU',
        region: 'local',
      },
    ],
    capsule_context: { jurisdiction: 'EU', data_classification: 'PHI' },
    termination: { trigger: 'system_restart', command_was_running: true, command_completed: false },
    internal: { account_id: 'acct_123' },
  };
}

/** Deterministic randomness for tests (never for real keys). */
export function seededRandom(seed: number): (n: number) => Uint8Array {
  let x = seed >>> 0 || 1;
  return (n) => {
    const out = new Uint8Array(n);
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      out[i] = x & 0xff;
    }
    return out;
  };
}
