// Customer co-signature vectors (docs/PROOF_FORMAT.md "Customer co-signatures"):
// a record whose trail events carry one valid, one missing and one forged
// customer signature, built by the emitter from fixed inputs and a seeded
// Ed25519 customer key (Ed25519 signatures are deterministic), committed under
// test/data/cosign-vectors/ and checked by cosign-vectors.test.ts with code
// that shares nothing with the co-signer.
// `node dist/test/proof/cosign-vectors.js --write` refreshes the file.
import { createPrivateKey, createPublicKey, sign } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { emitRecord, eventHash, generateEphemeralKey, type CustomerAttestation } from '../../shared/proof/index.js';
import { recordInput, seededRandom } from './fixtures.js';

export const COSIGN_VECTOR_DIR = fileURLToPath(new URL('../../../test/data/cosign-vectors/', import.meta.url));

/** A PKCS#8 Ed25519 key from 32 seed bytes. */
function ed25519Key(seed: Uint8Array) {
  const der = Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), Buffer.from(seed)]);
  return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
}

export function buildCosignVectors(): Record<string, unknown> {
  const customer = ed25519Key(seededRandom(41)(32));
  const stranger = ed25519Key(seededRandom(42)(32));
  const input = recordInput();
  const [first, second, third] = input.activity;
  const signed = (e: typeof first, key = customer): CustomerAttestation => {
    const h = eventHash(e!);
    return {
      seq: e!.seq,
      event_hash: h,
      algorithm: 'Ed25519',
      signature: sign(null, Buffer.from(h), key).toString('base64'),
    };
  };
  input.customer_attestations = [
    signed(first),
    { seq: second!.seq, event_hash: eventHash(second!), status: 'missing' },
    signed(third, stranger), // forged: another key's signature in the slot
  ];
  const record = emitRecord(input, { mode: 'ephemeral', key: generateEphemeralKey(seededRandom(43)) });
  return {
    'cosigned-one-missing-one-forged.json': {
      description:
        'A record whose three trail events carry a valid, a missing and a forged (another key) customer co-signature; the service proof itself verifies.',
      document: record,
      customer_public_key: createPublicKey(customer).export({ format: 'pem', type: 'spki' }).toString(),
      expect: { proof_valid: true, valid: [first!.seq], missing: [second!.seq], forged: [third!.seq] },
    },
  };
}

if (process.argv.includes('--write')) {
  for (const [name, v] of Object.entries(buildCosignVectors()))
    writeFileSync(COSIGN_VECTOR_DIR + name, JSON.stringify(v, null, 2) + '\n');
}
