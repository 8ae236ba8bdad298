// Customer co-signatures (docs/PROOF_FORMAT.md "Customer co-signatures"): the
// hash a customer's signer is sent for each activity event, and the check a
// verifier holding the customer's public key runs over a record's
// `customer_attestations`. The signature algorithm is injected (Ed25519 and
// RSA-PSS-SHA256 live with the caller: node:crypto in the CLI), so this module
// stays browser-safe like the rest of the proof library.
import type { ActivityEvent, CustomerAttestation } from './types.js';
import { hasher } from './crypto.js';
import { canonicalize } from './jcs.js';
import { fromBase64, utf8 } from './encoding.js';
import type { CryptoProvider } from './crypto.js';

export const CUSTOMER_ALGORITHMS = ['Ed25519', 'RSA-PSS-SHA256'] as const;
export type CustomerAlgorithm = (typeof CUSTOMER_ALGORITHMS)[number];

/** `sha512:` + hex SHA-512 of JCS(event): what the signer is sent and signs (as UTF-8). */
export function eventHash(event: ActivityEvent, provider?: CryptoProvider): string {
  return 'sha512:' + hasher(provider).sha512Utf8Hex(canonicalize(event));
}

/** Verifies `signature` over `message` with the customer's key; false on any malformed input. */
export type CustomerVerify = (algorithm: CustomerAlgorithm, message: Uint8Array, signature: Uint8Array) => boolean;

export interface CustomerAttestationReport {
  /** Trail events the record carries (0 when the trail is bound by the root alone). */
  events: number;
  /** Attestations present in the record. */
  attestations: number;
  valid: number;
  /** Seqs whose slot says the signer's answer never came (or was not a valid signature). */
  missing: number[];
  /** Seqs whose signature does not verify under the customer's key. */
  forged: number[];
  /** Seqs whose `event_hash` is not the hash of the carried event, or that name no carried event. */
  mismatched: number[];
  /** Carried events without an attestation slot. */
  unattested: number[];
}

/** The check of every attestation of `record` (an AuditRecord-like object) with the customer's key. */
export function checkCustomerAttestations(
  record: { activity?: unknown; customer_attestations?: unknown },
  verify: CustomerVerify,
  provider?: CryptoProvider,
): CustomerAttestationReport {
  const events = Array.isArray(record.activity) ? (record.activity as ActivityEvent[]) : [];
  const slots = Array.isArray(record.customer_attestations)
    ? (record.customer_attestations as CustomerAttestation[])
    : [];
  const bySeq = new Map<number, ActivityEvent>();
  for (const e of events) if (e && typeof e === 'object' && typeof e.seq === 'number') bySeq.set(e.seq, e);
  const r: CustomerAttestationReport = {
    events: events.length,
    attestations: slots.length,
    valid: 0,
    missing: [],
    forged: [],
    mismatched: [],
    unattested: [],
  };
  const seen = new Set<number>();
  for (const a of slots) {
    const seq = a && typeof a === 'object' && typeof a.seq === 'number' ? a.seq : -1;
    seen.add(seq);
    if (typeof a?.event_hash !== 'string') {
      r.mismatched.push(seq);
      continue;
    }
    const ev = bySeq.get(seq);
    // With the trail carried, the hash must be the event's; without it, the signature alone is checked.
    if (events.length > 0 && (!ev || eventHash(ev, provider) !== a.event_hash)) {
      r.mismatched.push(seq);
      continue;
    }
    if ('status' in a) {
      r.missing.push(seq);
      continue;
    }
    const sig = typeof a.signature === 'string' ? (fromBase64(a.signature) ?? null) : null;
    const ok =
      sig !== null &&
      (CUSTOMER_ALGORITHMS as readonly string[]).includes(a.algorithm) &&
      verify(a.algorithm, utf8(a.event_hash), sig);
    if (ok) r.valid++;
    else r.forged.push(seq);
  }
  for (const seq of bySeq.keys()) if (!seen.has(seq)) r.unattested.push(seq);
  return r;
}

/** One line beside the verdict, e.g. "customer co-signatures: 3 valid, 1 missing, 1 forged". */
export function customerAttestationLine(r: CustomerAttestationReport): string {
  if (r.attestations === 0) return 'customer co-signatures: none in this record';
  const parts = [`${r.valid} valid`, `${r.missing.length} missing`, `${r.forged.length} forged`];
  if (r.mismatched.length > 0) parts.push(`${r.mismatched.length} not matching their event`);
  if (r.unattested.length > 0) parts.push(`${r.unattested.length} events without a slot`);
  return `customer co-signatures: ${parts.join(', ')}`;
}
