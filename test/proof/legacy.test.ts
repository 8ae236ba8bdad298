// The legacy 1.0 session emitter, in the proof library: the shared step table,
// SHA-256 in place of SHA-512 in the chain rule, one signature over the final
// hash hex, the key zeroized; its documents verify like the shared legacy vector.
import t from 'tap';
import { createHash } from 'node:crypto';
import { readFileSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  emitLegacySessionProof,
  generateEphemeralKey,
  legacySignedAt,
  nobleCrypto,
  verdictLine,
  verifyProof,
  STEPS,
} from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { seededRandom } from './fixtures.js';
import { proofVectors, withoutVerifiedAt } from './helpers.js';

const REPO = fileURLToPath(new URL('../../../', import.meta.url));
const DESTROYED_AT = '2026-11-21T22:05:00.123456Z';
const sha256 = (s: string) => createHash('sha256').update(s, 'utf8').digest('hex');
const legacyVector = proofVectors().find((v) => v.name === 'valid-legacy-session.json')!;

function emit(seed = 3) {
  return emitLegacySessionProof(
    'ses_4f9a2c7kq2m9x4c8',
    DESTROYED_AT,
    generateEphemeralKey(seededRandom(seed)),
    DESTROYED_AT,
  );
}

t.test('emitted documents have the vector form and verify to its expect, with each provider', async (t) => {
  const p = emit();
  const vdoc = legacyVector.document as Record<string, any>;
  t.same(Object.keys(p.doc).sort(), Object.keys(vdoc).sort(), 'same members as the shared legacy vector');
  const chain = p.doc['chain'] as Record<string, unknown>[];
  chain.forEach((s, i) => t.same(Object.keys(s).sort(), Object.keys(vdoc['chain'][i]).sort()));
  t.same(Object.keys(p.doc['attestation'] as object).sort(), Object.keys(vdoc['attestation']).sort());
  for (const crypto of [nobleCrypto, nodeCrypto]) {
    const r = verifyProof(JSON.parse(JSON.stringify(p.doc)), { crypto });
    t.strictSame(withoutVerifiedAt(r), legacyVector.expect, 'the vector expect (chain_integrity false: reduced scope)');
  }
  t.match(verdictLine(verifyProof(p.doc)), /^AuditProof verified at reduced scope/);
});

t.test('the chain: the shared step table, SHA-256 chain rule, final hash = step 8, signed as hex', async (t) => {
  const p = emit();
  let prev = sha256('');
  const chain = p.doc['chain'] as { step: number; subsystem: string; operation: string; chain_hash: string }[];
  STEPS.forEach((def, i) => {
    prev = sha256(`${prev}\0${def.subsystem}\0destroy\0${def.method}\0${DESTROYED_AT}`);
    t.strictSame(chain[i], {
      step: def.step,
      subsystem: def.subsystem,
      operation: def.operation,
      chain_hash: `sha256:${prev}`,
    });
  });
  t.equal(p.doc['final_hash'], `sha256:${prev}`);
  const wrong = structuredClone(p.doc) as any;
  wrong.final_hash = wrong.chain[7].chain_hash = `sha256:${'1'.repeat(64)}`;
  t.match(verifyProof(wrong), { valid: false, failure_reason: { type: 'SignatureMismatch', reason: 'DoesNotVerify' } });
});

t.test('key: zeroized after the signature; a zeroized key cannot sign; key id from the signing instant', async (t) => {
  const key = generateEphemeralKey(seededRandom(9));
  const p = emitLegacySessionProof('ses_abc', DESTROYED_AT, key, '2026-11-21T22:06:00.000000Z');
  t.ok(
    key.privateKey.every((b) => b === 0),
    'private key zeroized',
  );
  t.equal(p.public_key, Buffer.from(key.publicKey).toString('base64'));
  t.equal(p.key_id, 'svc-verify-20261121T220600000000Z-ses_abc');
  t.equal(p.signed_at, '2026-11-21T22:06:00.000000Z');
  t.throws(() => emitLegacySessionProof('ses_abc', DESTROYED_AT, key, DESTROYED_AT), /zeroized/);
  t.equal(legacySignedAt(DESTROYED_AT, DESTROYED_AT), '2026-11-21T22:05:00.123457Z', 'strictly after destroyed_at');
  t.equal(legacySignedAt('2026-11-21T22:05:00.999999Z', '2026-01-01T00:00:00.000000Z'), '2026-11-21T22:05:01.000000Z');
});

t.test('one place wires SHA-512 into the shared @noble module', async (t) => {
  const hits: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.ts') && /hashes\.sha512\s*=/.test(readFileSync(p, 'utf8'))) hits.push(p.slice(REPO.length));
    }
  };
  for (const d of ['shared', 'control-plane', 'cli', 'sandbox-runner', 'egress-proxy']) walk(join(REPO, d));
  t.strictSame(hits, ['shared/proof/crypto.ts']);
});
