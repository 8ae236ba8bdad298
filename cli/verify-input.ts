// What `capsule verify` accepts in a file or JSON line, and how each piece
// becomes a proof to verify:
//   - a proof document (has cdp_version, or is anything else: it gets a verdict);
//   - a destroy response or stored-proof record or POST /v1/verify body
//     (no cdp_version, has `cdp` and/or `audit_proof`): each of those is verified;
//   - a golden test vector `{document, expect, manifest?}`: its document,
//     with the vector's own manifest when no --trust-manifest was given.
import {
  checkCustomerAttestations,
  verifyProof,
  type CryptoProvider,
  type CustomerAttestationReport,
  type CustomerVerify,
  type TrustManifest,
  type VerifyResult,
} from '../shared/proof/index.js';

export interface Item {
  label: string;
  doc: unknown;
  /** A test vector's own manifest. */
  vectorManifest?: TrustManifest;
}

export interface Verdict {
  label: string;
  result: VerifyResult;
  /** With --customer-key, the check of a record's customer co-signatures. */
  customer_attestations?: CustomerAttestationReport;
  /** A verified managed-authority proof: its authority and key version, and whether a trust manifest resolved them. */
  authority?: { signing_authority_id: string; signing_key_version: number; key_resolved: boolean };
}
export type LineOutcome = { verdicts: Verdict[] } | { error: string };

export interface VerifySettings {
  manifest?: TrustManifest;
  crypto: CryptoProvider;
  /** The customer's key check (--customer-key); records carrying `activity` or attestations are checked. */
  customer?: CustomerVerify;
}

function isObject(v: unknown): v is Record<string, unknown> {
  return v !== null && typeof v === 'object' && !Array.isArray(v);
}

export function itemsOf(value: unknown, label: string): Item[] {
  if (!isObject(value) || value['cdp_version'] !== undefined) return [{ label, doc: value }];
  if (value['document'] !== undefined && value['expect'] !== undefined) {
    const m = validateManifest(value['manifest']);
    return [
      {
        label: `${label} (test vector)`,
        doc: value['document'],
        ...(typeof m === 'string' ? {} : { vectorManifest: m }),
      },
    ];
  }
  const items: Item[] = [];
  if (value['cdp'] !== undefined) items.push({ label: `${label} cdp`, doc: value['cdp'] });
  if (value['audit_proof'] !== undefined) items.push({ label: `${label} audit_proof`, doc: value['audit_proof'] });
  return items.length > 0 ? items : [{ label, doc: value }];
}

export function verifyItems(items: Item[], s: VerifySettings): Verdict[] {
  return items.map((it) => {
    const manifest = s.manifest ?? it.vectorManifest;
    const result = verifyProof(it.doc, { crypto: s.crypto, ...(manifest ? { manifest } : {}) });
    const d = isObject(it.doc) ? it.doc : {};
    const authority =
      result.valid && typeof d['signing_authority_id'] === 'string' && Number.isInteger(d['signing_key_version'])
        ? {
            signing_authority_id: d['signing_authority_id'],
            signing_key_version: d['signing_key_version'] as number,
            // Stage 6 ran only with a manifest; a valid verdict then means the key resolved.
            key_resolved: manifest !== undefined,
          }
        : undefined;
    const checkCustomer = s.customer && (d['customer_attestations'] !== undefined || d['activity'] !== undefined);
    return {
      label: it.label,
      result,
      ...(authority ? { authority } : {}),
      ...(checkCustomer ? { customer_attestations: checkCustomerAttestations(d, s.customer!, s.crypto) } : {}),
    };
  });
}

/** A short, printable reason from a JSON.parse error (no input bytes beyond a few characters). */
export function jsonErrorReason(err: unknown): string {
  const msg = err instanceof Error ? err.message : String(err);
  const clean = msg.replace(/[^\x20-\x7e]/g, '?');
  return clean.length > 100 ? clean.slice(0, 97) + '...' : clean;
}

export function verifyLine(line: string, label: string, s: VerifySettings): LineOutcome {
  let value: unknown;
  try {
    value = JSON.parse(line);
  } catch (err) {
    return { error: `${label}: not valid JSON (${jsonErrorReason(err)})` };
  }
  return { verdicts: verifyItems(itemsOf(value, label), s) };
}

/** Trust manifest shape of docs/PROOF_FORMAT.md "Managed signing authority"; a string names the first problem. */
export function validateManifest(v: unknown): TrustManifest | string {
  if (!isObject(v)) return 'trust manifest must be a JSON object';
  const auths = v['authorities'];
  if (!Array.isArray(auths)) return 'trust manifest: "authorities" must be an array';
  for (let i = 0; i < auths.length; i++) {
    const a: unknown = auths[i];
    if (!isObject(a)) return `trust manifest: authorities[${i}] must be an object`;
    if (typeof a['signing_authority_id'] !== 'string')
      return `trust manifest: authorities[${i}].signing_authority_id must be a string`;
    const keys = a['keys'];
    if (!Array.isArray(keys)) return `trust manifest: authorities[${i}].keys must be an array`;
    for (let j = 0; j < keys.length; j++) {
      const k: unknown = keys[j];
      if (!isObject(k)) return `trust manifest: authorities[${i}].keys[${j}] must be an object`;
      if (!Number.isInteger(k['signing_key_version']))
        return `trust manifest: authorities[${i}].keys[${j}].signing_key_version must be an integer`;
      if (typeof k['public_key'] !== 'string')
        return `trust manifest: authorities[${i}].keys[${j}].public_key must be a string`;
    }
  }
  return v as unknown as TrustManifest;
}
