// Canonical view and canonical_hash (docs/PROOF_FORMAT.md "Canonical view"): for each fixed
// member present in the document, its value unchanged, plus `attestation`
// reduced to algorithm, public_key and key_id. Nothing else (not
// canonical_hash, activity, evidence or internal) enters the view, so the
// AuditRecord and its AuditProof projection share one signature.
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { serialize } from './jcs.js';

export const VIEW_MEMBERS = [
  'cdp_version',
  'capsule_id',
  'created_at',
  'destroyed_at',
  'completeness',
  'reason',
  'chain',
  'final_hash',
  'capsule_context',
  'termination',
  'regulatory_context',
  'component_proofs',
  'activity_root',
  'signing_authority_id',
  'signing_key_version',
] as const;

export const ATTESTATION_VIEW_MEMBERS = ['algorithm', 'public_key', 'key_id'] as const;

// Member names in RFC 8785 order (UTF-16 code units), pre-quoted.
const SORTED_TOP = ([...VIEW_MEMBERS, 'attestation'] as string[]).sort();
const SORTED_ATT = ([...ATTESTATION_VIEW_MEMBERS] as string[]).sort();
const QUOTED = new Map<string, string>([...SORTED_TOP, ...SORTED_ATT].map((k) => [k, JSON.stringify(k) + ':']));

/** The view as a plain object (for inspection and tests). */
export function canonicalView(doc: Record<string, unknown>): Record<string, unknown> {
  const view: Record<string, unknown> = {};
  for (const k of VIEW_MEMBERS) if (doc[k] !== undefined) view[k] = doc[k];
  const att = doc['attestation'];
  if (att !== undefined) {
    if (att !== null && typeof att === 'object' && !Array.isArray(att)) {
      const reduced: Record<string, unknown> = {};
      for (const k of ATTESTATION_VIEW_MEMBERS) {
        const v = (att as Record<string, unknown>)[k];
        if (v !== undefined) reduced[k] = v;
      }
      view['attestation'] = reduced;
    } else {
      view['attestation'] = att;
    }
  }
  return view;
}

/**
 * JCS of the canonical view, built straight from the document without an
 * intermediate object (the hot path of verification). Throws JcsError when a
 * view member is not JSON data. `chainJcs`, when given, is the JCS of
 * doc.chain already produced by the caller (stage 0 writes it as it checks
 * the steps).
 */
export function canonicalViewJcs(doc: Record<string, unknown>, chainJcs?: string): string {
  let out = '{';
  let first = true;
  for (const k of SORTED_TOP) {
    const v = doc[k];
    if (v === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += QUOTED.get(k)!;
    if (k === 'chain' && chainJcs !== undefined) {
      out += chainJcs;
    } else if (k === 'attestation' && v !== null && typeof v === 'object' && !Array.isArray(v)) {
      out += reducedAttestationJcs(v as Record<string, unknown>);
    } else {
      out += serialize(v, 1);
    }
  }
  return out + '}';
}

function reducedAttestationJcs(att: Record<string, unknown>): string {
  let out = '{';
  let first = true;
  for (const k of SORTED_ATT) {
    const v = att[k];
    if (v === undefined) continue;
    if (!first) out += ',';
    first = false;
    out += QUOTED.get(k)! + serialize(v, 2);
  }
  return out + '}';
}

export function canonicalHashOfJcs(h: Hasher, viewJcs: string): string {
  return 'sha512:' + canonicalHashHexOfJcs(h, viewJcs);
}

/** The hex part of canonical_hash (no prefix). */
export function canonicalHashHexOfJcs(h: Hasher, viewJcs: string): string {
  return h.sha512Utf8Hex(viewJcs);
}

/** `sha512:<hex>` of JCS(canonical view). Throws JcsError when the view is not JSON data. */
export function canonicalHash(doc: Record<string, unknown>, provider?: CryptoProvider): string {
  return canonicalHashOfJcs(hasher(provider), canonicalViewJcs(doc));
}
