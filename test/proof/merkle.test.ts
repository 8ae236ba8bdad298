// RFC 6962 tree shape over raw chunks, against a direct recursive reading of the RFC.
import t from 'tap';
import { MerkleAccumulator, merkleLeafHash, merkleRoot, nobleCrypto, toHex } from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';

function H(parts: Uint8Array[]): Uint8Array {
  const len = parts.reduce((n, p) => n + p.length, 0);
  const b = new Uint8Array(len);
  let o = 0;
  for (const p of parts) {
    b.set(p, o);
    o += p.length;
  }
  return nobleCrypto.sha512(b);
}

// MTH(D[n]) per RFC 6962 section 2.1, k = largest power of two smaller than n.
function mth(d: Uint8Array[]): Uint8Array {
  if (d.length === 0) return H([]);
  if (d.length === 1) return H([Uint8Array.of(0), d[0]!]);
  let k = 1;
  while (k * 2 < d.length) k *= 2;
  return H([Uint8Array.of(1), mth(d.slice(0, k)), mth(d.slice(k))]);
}

t.test('merkleRoot equals the RFC definition for 0..40 leaves, both providers', async (t) => {
  for (let n = 0; n <= 40; n++) {
    const leaves = Array.from({ length: n }, (_, i) => new TextEncoder().encode(`chunk-${i}-${'x'.repeat(i)}`));
    const want = toHex(mth(leaves));
    t.equal(toHex(merkleRoot(leaves)), want, `${n} leaves noble`);
    t.equal(toHex(merkleRoot(leaves, nodeCrypto)), want, `${n} leaves node`);
    for (const provider of [nobleCrypto, nodeCrypto]) {
      const byData = new MerkleAccumulator(provider);
      const byLeafHash = new MerkleAccumulator(provider);
      for (const l of leaves) {
        byData.push(l);
        byLeafHash.pushLeafHash(merkleLeafHash(l, provider));
      }
      t.equal(toHex(byData.root()), want, `${n} leaves, incremental`);
      t.equal(toHex(byLeafHash.root()), want, `${n} leaves, incremental from leaf hashes`);
      t.equal(byData.count, n);
    }
  }
});

t.test('empty tree is SHA-512 of nothing; leaf and node domains differ', async (t) => {
  t.equal(toHex(merkleRoot([])), toHex(nobleCrypto.sha512(new Uint8Array(0))));
  const a = Uint8Array.of(1, 2, 3);
  t.not(toHex(merkleRoot([a])), toHex(nobleCrypto.sha512(a)), 'leaf hash has the 0x00 prefix');
  t.not(toHex(merkleRoot([a, a])), toHex(merkleRoot([a])), 'two equal leaves differ from one');
});
