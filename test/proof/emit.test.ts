// emit -> verify round trips, key handling and projections.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import {
  emitRecord,
  emitPartialRecord,
  generateEphemeralKey,
  ephemeralKeyId,
  toAuditProof,
  toPresentation,
  verifyProof,
  canonicalize,
  canonicalView,
  canonicalHash,
  activityRoot,
  computeChain,
  nobleCrypto,
  type AuditRecord,
  type SigningKeyMaterial,
} from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { toBase64, toHex, utf8 } from '../../shared/proof/encoding.js';
import { recordInput, partialInput, seededRandom } from './fixtures.js';

const rnd = (n: number) => new Uint8Array(randomBytes(n));

function ephemeral(): { material: SigningKeyMaterial; privateKey: Uint8Array; publicKey: Uint8Array } {
  const key = generateEphemeralKey(rnd);
  return { material: { mode: 'ephemeral', key }, privateKey: key.privateKey, publicKey: key.publicKey };
}

t.test('ephemeral record verifies, as record and as AuditProof, with both providers', async (t) => {
  const { material, privateKey, publicKey } = ephemeral();
  const rec = emitRecord(recordInput(), material);
  t.ok(
    privateKey.every((b) => b === 0),
    'private key is zero after emit',
  );
  t.equal(privateKey.length, 32);
  t.equal(rec.cdp_version, '2.1');
  t.equal(rec.chain.length, 8);
  t.same(
    rec.chain.map((s) => s.chain_hash),
    computeChain(rec.destroyed_at!),
    'chain formula',
  );
  t.equal(rec.final_hash, rec.chain[7]!.chain_hash);
  t.equal(rec.attestation.public_key, 'base64:' + toBase64(publicKey));
  t.equal(rec.attestation.key_id, 'svc-verify-20261121T220500123456Z-cap_7kq2m9x4');
  t.equal(rec.activity_root, activityRoot(recordInput().activity));
  t.equal(rec.canonical_hash, canonicalHash(rec as unknown as Record<string, unknown>));
  rec.chain.forEach((s, i) =>
    t.equal(s.evidence_hash, 'sha512:' + toHex(nobleCrypto.sha512(utf8(canonicalize(rec.evidence[i]))))),
  );
  t.same(
    Object.keys(rec.component_proofs!).sort(),
    ['key_destruction', 'memory_wipe', 'merkle_zero_state', 'mountinfo_verification', 'namespace_verification'],
    'steps 1-6 with performed: true only (step 5 did not perform)',
  );
  t.equal(rec.component_proofs!['memory_wipe'], rec.chain[2]!.evidence_hash);
  const json = JSON.parse(JSON.stringify(rec));
  for (const crypto of [nobleCrypto, nodeCrypto]) {
    t.same(verifyProof(json, { crypto, now: () => 'T' }), {
      valid: true,
      verified_at: 'T',
      checks: {
        cdp_version_valid: true,
        chain_integrity: true,
        final_hash_valid: true,
        step_count: 8,
        signature_valid: true,
        algorithm: 'Ed25519',
      },
      // The fixture's step 5 says performed: false: stated in the signed termination member.
      destruction: { status: 'incomplete', incomplete_steps: [{ step: 5, reason: 'step 5 not performed' }] },
    });
    const proof = JSON.parse(JSON.stringify(toAuditProof(rec)));
    t.notOk('activity' in proof || 'evidence' in proof || 'internal' in proof, 'record-only members dropped');
    t.equal(proof.attestation.signature, rec.attestation.signature, 'one signature');
    t.equal(verifyProof(proof, { crypto }).valid, true, 'AuditProof projection verifies');
  }
  const view = canonicalView(json);
  t.notOk('canonical_hash' in view || 'activity' in view || 'evidence' in view || 'internal' in view);
  t.notOk('signature' in (view['attestation'] as object), 'signature is not in the view');
});

t.test('emitted record with internal ids: they never reach the AuditProof or the view', async (t) => {
  const rec = emitRecord(recordInput(), ephemeral().material);
  t.same(rec.internal, { account_id: 'acct_123', runner_node: 'node-a' });
  t.notMatch(JSON.stringify(toAuditProof(rec)), /acct_123|node-a/);
  t.notMatch(canonicalize(canonicalView(rec as unknown as Record<string, unknown>)), /acct_123/);
  // Changing internal ids does not touch the signature basis.
  const changed = JSON.parse(JSON.stringify(rec));
  changed.internal.account_id = 'acct_999';
  t.equal(verifyProof(changed).valid, true);
});

t.test('managed-authority record: fields signed, key kept, manifest resolves', async (t) => {
  const key = generateEphemeralKey(seededRandom(7));
  const material: SigningKeyMaterial = {
    mode: 'managed',
    signing_authority_id: 'auth_acme',
    signing_key_version: 3,
    key_id: 'svc-authority-acme-v3',
    publicKey: key.publicKey,
    privateKey: key.privateKey,
  };
  const rec = JSON.parse(JSON.stringify(emitRecord(recordInput(), material))) as AuditRecord;
  t.notOk(
    key.privateKey.every((b) => b === 0),
    'managed private key is not zeroized',
  );
  t.equal(rec.signing_authority_id, 'auth_acme');
  t.equal(rec.signing_key_version, 3);
  t.equal(rec.attestation.key_id, 'svc-authority-acme-v3');
  const raw = toBase64(key.publicKey);
  const manifest = {
    authorities: [{ signing_authority_id: 'auth_acme', keys: [{ signing_key_version: 3, public_key: raw }] }],
  };
  t.equal(verifyProof(rec, { manifest }).valid, true);
  t.equal(verifyProof(rec, { manifest, crypto: nodeCrypto }).valid, true);
  const wrongVersion = {
    authorities: [{ signing_authority_id: 'auth_acme', keys: [{ signing_key_version: 2, public_key: raw }] }],
  };
  t.match(verifyProof(rec, { manifest: wrongVersion }), {
    valid: false,
    stage_reached: 6,
    failure_reason: { type: 'KeyResolution', reason: 'UnknownKeyVersion' },
  });
  const tampered = structuredClone(rec) as any;
  tampered.signing_key_version = 4;
  t.match(
    verifyProof(tampered),
    { valid: false, stage_reached: 4, failure_reason: { type: 'CanonicalHashMismatch' } },
    'authority fields are in the view',
  );
  // A second record with the same authority key works (key kept).
  t.equal(verifyProof(JSON.parse(JSON.stringify(emitRecord(recordInput(), material)))).valid, true);
});

t.test('partial record: signed, verifies as partial, zeroized', async (t) => {
  const { material, privateKey } = ephemeral();
  const rec = JSON.parse(JSON.stringify(emitPartialRecord(partialInput(), material)));
  t.ok(privateKey.every((b) => b === 0));
  t.equal(rec.completeness, 'partial');
  t.same(rec.chain, []);
  t.notOk('destroyed_at' in rec || 'final_hash' in rec);
  t.equal(rec.attestation.key_id, 'svc-verify-partial-cap_7kq2m9x4');
  for (const crypto of [nobleCrypto, nodeCrypto]) {
    t.same(verifyProof(rec, { crypto, now: () => 'T' }), {
      valid: true,
      completeness: 'partial',
      verified_at: 'T',
      checks: {
        cdp_version_valid: true,
        chain_integrity: false,
        final_hash_valid: false,
        step_count: 0,
        signature_valid: true,
        algorithm: 'Ed25519',
      },
    });
  }
  const unsigned = structuredClone(rec);
  delete unsigned.attestation;
  t.match(
    verifyProof(unsigned),
    { valid: false, stage_reached: 4, failure_reason: { type: 'CanonicalHashMismatch' } },
    'the attestation key is in the view',
  );
  delete unsigned.canonical_hash;
  t.match(verifyProof(unsigned), {
    valid: false,
    stage_reached: 5,
    failure_reason: { type: 'AttestationMissing', reason: 'Unsigned' },
  });
});

t.test('a zeroized or mismatched key cannot sign; zeroized even when emit fails', async (t) => {
  const { material, privateKey } = ephemeral();
  emitRecord(recordInput(), material);
  t.throws(() => emitRecord(recordInput(), material), /zeroized/, 'the one-use key cannot sign twice');
  const k2 = generateEphemeralKey(rnd);
  const bad = recordInput();
  bad.evidence = bad.evidence.slice(0, 7);
  t.throws(() => emitRecord(bad, { mode: 'ephemeral', key: k2 }), /evidence must hold 8/);
  t.ok(
    k2.privateKey.every((b) => b === 0),
    'zeroized on failure',
  );
  const k3 = generateEphemeralKey(rnd);
  const other = generateEphemeralKey(rnd);
  t.throws(
    () =>
      emitRecord(recordInput(), { mode: 'ephemeral', key: { privateKey: k3.privateKey, publicKey: other.publicKey } }),
    /does not belong/,
  );
  t.ok(privateKey.every((b) => b === 0));
});

t.test('key generation uses the injected randomness; key ids', async (t) => {
  const a = generateEphemeralKey(seededRandom(1));
  const b = generateEphemeralKey(seededRandom(1));
  t.same(a.publicKey, b.publicKey, 'same seed, same key');
  t.notSame(generateEphemeralKey(seededRandom(2)).publicKey, a.publicKey);
  t.throws(() => generateEphemeralKey(() => new Uint8Array(16)), /32 bytes/);
  t.equal(ephemeralKeyId('2026-01-01T00:00:00.000000Z', 'cap_abc'), 'svc-verify-20260101T000000000000Z-cap_abc');
  t.throws(() => ephemeralKeyId('2026-01-01T00:00:00Z', 'cap_abc'), /six fraction digits/);
});

t.test('presentation projection: summaries, same attestation, rejected offline', async (t) => {
  const rec = emitRecord(recordInput(), ephemeral().material);
  const p = toPresentation(rec, { verifyUrl: 'https://verify.example/x' });
  t.notOk('chain' in p || 'activity' in p || 'evidence' in p || 'internal' in p);
  t.same(p['attestation'], rec.attestation);
  t.equal(p['document_hash'], rec.canonical_hash);
  t.match(p['destruction'], { steps: 8, final_hash: rec.final_hash, destroyed_at: rec.destroyed_at });
  t.match(p['verify'], { url: 'https://verify.example/x', activity_events: 3, activity_root: rec.activity_root });
  t.match(verifyProof(JSON.parse(JSON.stringify(p))), {
    valid: false,
    stage_reached: 0,
    failure_reason: { type: 'FormatInvalid', reason: 'PresentationForm' },
  });
});

t.test('the record does not change when the caller later changes its input', async (t) => {
  const input = recordInput();
  const rec = emitRecord(input, ephemeral().material);
  input.activity[0]!['region'] = 'elsewhere';
  input.evidence[2]!['bytes_overwritten'] = 1;
  input.capsule_context!.jurisdiction = 'US';
  t.equal(verifyProof(JSON.parse(JSON.stringify(rec))).valid, true);
  t.equal(rec.activity[0]!['region'], 'local');
});

t.test('the node:crypto provider emits byte-identical records to @noble (Ed25519 is deterministic)', async (t) => {
  for (let i = 0; i < 20; i++) {
    const seed = rnd(32);
    const nobleKey = generateEphemeralKey(() => Uint8Array.from(seed));
    const nodeKey = generateEphemeralKey(() => Uint8Array.from(seed), nodeCrypto);
    t.same(nodeKey.publicKey, nobleKey.publicKey, 'same public key from the same seed');
    const byNoble = emitRecord(recordInput(), { mode: 'ephemeral', key: nobleKey });
    const byNode = emitRecord(recordInput(), { mode: 'ephemeral', key: nodeKey }, nodeCrypto);
    t.equal(canonicalize(byNode), canonicalize(byNoble), 'same record, signature included');
    t.ok(
      nodeKey.privateKey.every((b) => b === 0),
      'the node path zeroizes the ephemeral key too',
    );
    const partial = emitPartialRecord(
      partialInput(),
      { mode: 'ephemeral', key: generateEphemeralKey(() => Uint8Array.from(seed), nodeCrypto) },
      nodeCrypto,
    );
    t.equal(
      canonicalize(partial),
      canonicalize(
        emitPartialRecord(partialInput(), {
          mode: 'ephemeral',
          key: generateEphemeralKey(() => Uint8Array.from(seed)),
        }),
      ),
    );
    t.equal(verifyProof(byNode).valid, true);
  }
  // A key that does not belong to its seed is refused on the node path as on noble's.
  const k = generateEphemeralKey(rnd, nodeCrypto);
  const other = generateEphemeralKey(rnd, nodeCrypto);
  t.throws(
    () => emitRecord(recordInput(), { mode: 'ephemeral', key: { ...k, publicKey: other.publicKey } }, nodeCrypto),
    /does not belong/,
  );
});
