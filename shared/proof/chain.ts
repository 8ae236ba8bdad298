// The frozen 8-step destruction chain (SPEC "Hash chain rule", docs/PROOF_FORMAT.md "The chain"):
// chain_hash[n] = SHA-512(prev || 0x00 || subsystem || 0x00 || "destroy" || 0x00 || method || 0x00 || destroyed_at)
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';

export interface StepDefinition {
  step: number;
  subsystem: string;
  operation: string;
  /** Fixed hash-input constant (never serialized). */
  method: string;
  /** component_proofs key for steps 1..6; steps 7 and 8 have none. */
  component?: string;
}

export const STEPS: readonly StepDefinition[] = Object.freeze(
  [
    {
      step: 1,
      subsystem: 'eee_namespace',
      operation: 'environment_isolation',
      method: 'procfs_verification',
      component: 'namespace_verification',
    },
    {
      step: 2,
      subsystem: 'eee_tmpfs',
      operation: 'filesystem_isolation',
      method: 'mountinfo_verification',
      component: 'mountinfo_verification',
    },
    {
      step: 3,
      subsystem: 'eee_memory',
      operation: 'multipass_wipe',
      method: 'dod_5220_multipass_wipe',
      component: 'memory_wipe',
    },
    {
      step: 4,
      subsystem: 'dire_keys',
      operation: 'key_destruction',
      method: 'ed25519_key_destruction',
      component: 'key_destruction',
    },
    {
      step: 5,
      subsystem: 'dire_identity',
      operation: 'credential_incineration',
      method: 'credential_incineration',
      component: 'credential_incineration',
    },
    {
      step: 6,
      subsystem: 'fgx_forensic',
      operation: 'merkle_zero_state',
      method: 'merkle_tree_verification',
      component: 'merkle_zero_state',
    },
    { step: 7, subsystem: 'rzl_audit', operation: 'chain_integrity_seal', method: 'hash_chain_validation' },
    {
      step: 8,
      subsystem: 'capsule_destroy',
      operation: 'lifecycle_completion',
      method: 'capsule_lifecycle_verification',
    },
  ].map((s) => Object.freeze(s)),
);

export const STEP_COUNT = 8;

/** hex SHA-512 of the empty string: `prev` for step 1. */
export const GENESIS_HEX =
  'cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e';

/** One step's chain hash as lower-case hex (no prefix). All inputs are UTF-8 strings. */
export function chainStepHex(h: Hasher, prevHex: string, def: StepDefinition, destroyedAt: string): string {
  return h.sha512Utf8Hex(`${prevHex}\0${def.subsystem}\0destroy\0${def.method}\0${destroyedAt}`);
}

// The fixed middle of each step's hash input, `\0subsystem\0destroy\0method\0`,
// built once: per step only prev and destroyed_at are joined around it.
const STEP_MIDDLES: readonly string[] = STEPS.map((d) => `\0${d.subsystem}\0destroy\0${d.method}\0`);

/** chainStepHex for the step at index i (0-based) of STEPS. */
export function chainStepHexAt(h: Hasher, prevHex: string, i: number, destroyedAt: string): string {
  return h.sha512Utf8Hex(prevHex + STEP_MIDDLES[i]! + destroyedAt);
}

/** The 8 chain hashes, hex without prefix, for a destroyed_at string. */
export function chainHashes(h: Hasher, destroyedAt: string): string[] {
  const out: string[] = [];
  let prev = GENESIS_HEX;
  for (let i = 0; i < STEP_COUNT; i++) {
    prev = chainStepHexAt(h, prev, i, destroyedAt);
    out.push(prev);
  }
  return out;
}

/** The 8 serialized chain hashes (`sha512:<hex>`) for a destroyed_at string. */
export function computeChain(destroyedAt: string, provider?: CryptoProvider): string[] {
  return chainHashes(hasher(provider), destroyedAt).map((x) => 'sha512:' + x);
}
