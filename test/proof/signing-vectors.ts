// Managed-authority vectors (docs/PROOF_FORMAT.md "Managed signing authority"):
// built by the emitter from fixed inputs and seeded authority keys, committed
// under test/data/signing-vectors/, and checked by signing-vectors.test.ts with
// the verifier (which shares no signing code), also rebuilding them to prove the
// committed files are what the code emits.
// `node dist/test/proof/signing-vectors.js --write` refreshes the files.
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { emitRecord, toAuditProof, type AuditRecord } from '../../shared/proof/index.js';
import { recordInput, seededRandom } from './fixtures.js';

export const SIGNING_VECTOR_DIR = fileURLToPath(new URL('../../../test/data/signing-vectors/', import.meta.url));

export interface SigningVector {
  description: string;
  document: Record<string, unknown>;
  manifest: unknown;
  expect: Record<string, unknown>;
}

const AUTHORITY = 'acme-eu-1';

function seed(n: number): Uint8Array {
  return Uint8Array.from(seededRandom(n)(32));
}

function emitManaged(version: number, privateKey: Uint8Array, authority = AUTHORITY): AuditRecord {
  // Every step performed (as the destruction vectors' complete case), so the statement reads "complete".
  const input = recordInput();
  input.evidence = input.evidence.map((x) => ({ ...x }));
  input.evidence[4] = { method: 'credential_incineration', performed: true, processes_scanned: 12 };
  return emitRecord(input, {
    mode: 'managed',
    signing_authority_id: authority,
    signing_key_version: version,
    key_id: `svc-authority-${authority}-v${version}`,
    publicKey: ed25519PublicKey(privateKey),
    privateKey,
  });
}

/** The public key of an RFC 8032 seed through node:crypto (PKCS#8 prefix of RFC 8410), not the library under test. */
export function ed25519PublicKey(seed: Uint8Array): Uint8Array {
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]);
  const spki = createPublicKey(createPrivateKey({ key: der, format: 'der', type: 'pkcs8' })).export({
    format: 'der',
    type: 'spki',
  });
  return new Uint8Array(spki.subarray(spki.length - 32));
}

const b64 = (b: Uint8Array) => Buffer.from(b).toString('base64');

const CHECKS = {
  cdp_version_valid: true,
  chain_integrity: true,
  final_hash_valid: true,
  step_count: 8,
  signature_valid: true,
  algorithm: 'Ed25519',
};

const resolution = (reason: string) => ({
  valid: false,
  stage_reached: 6,
  failure_reason: { type: 'KeyResolution', reason },
});

export function buildSigningVectors(): Record<string, SigningVector> {
  const k1 = seed(21);
  const k2 = seed(22);
  const other = seed(23);
  const pub1 = b64(ed25519PublicKey(k1));
  const pub2 = b64(ed25519PublicKey(k2));
  const v1 = toAuditProof(emitManaged(1, k1)) as unknown as Record<string, unknown>;
  const v2 = toAuditProof(emitManaged(2, k2)) as unknown as Record<string, unknown>;
  const both = {
    authorities: [
      {
        signing_authority_id: AUTHORITY,
        keys: [
          { signing_key_version: 1, public_key: pub1 },
          { signing_key_version: 2, public_key: pub2 },
        ],
      },
    ],
  };
  const onlyV1 = {
    authorities: [{ signing_authority_id: AUTHORITY, keys: [{ signing_key_version: 1, public_key: pub1 }] }],
  };
  const otherAuthority = {
    authorities: [{ signing_authority_id: 'other-install', keys: [{ signing_key_version: 1, public_key: pub1 }] }],
  };
  // The manifest lists version 1 with a different key than the one that signed.
  const mismatch = {
    authorities: [
      { signing_authority_id: AUTHORITY, keys: [{ signing_key_version: 1, public_key: b64(ed25519PublicKey(other)) }] },
    ],
  };
  return {
    'valid-managed-v1.json': {
      description: 'a managed-authority proof (version 1) resolving against the manifest',
      document: v1,
      manifest: both,
      expect: { valid: true, checks: CHECKS, destruction: { status: 'complete' } },
    },
    'valid-rotated-v2.json': {
      description: 'after rotation: a version-2 proof resolving against a manifest listing versions 1 and 2',
      document: v2,
      manifest: both,
      expect: { valid: true, checks: CHECKS, destruction: { status: 'complete' } },
    },
    'invalid-unknown-authority.json': {
      description:
        "the proof's authority is not in the manifest (a self-hosted install's proof against another manifest)",
      document: v1,
      manifest: otherAuthority,
      expect: resolution('UnknownAuthority'),
    },
    'invalid-unknown-version.json': {
      description: 'a version-2 proof against a manifest that lists only version 1',
      document: v2,
      manifest: onlyV1,
      expect: resolution('UnknownKeyVersion'),
    },
    'invalid-key-mismatch.json': {
      description: "the manifest's version-1 key is not the key embedded in (and verifying) the proof",
      document: v1,
      manifest: mismatch,
      expect: resolution('KeyMismatch'),
    },
  };
}

if (process.argv.includes('--write')) {
  for (const [name, v] of Object.entries(buildSigningVectors())) {
    writeFileSync(SIGNING_VECTOR_DIR + name, JSON.stringify(v, null, 2) + '\n');
  }
}
