// RFC 6962 Merkle Tree Hash with SHA-512 (CONTRACT §5 rules):
// leaf = SHA-512(0x00 || data), node = SHA-512(0x01 || left || right),
// split at the largest power of two below n, empty tree = SHA-512("").
// LOCAL COPY until shared/proof/merkle.ts lands from the proof helper; the
// lead should switch the import to the shared one when merging.
import { createHash } from 'node:crypto';

export function leafHash(data: Uint8Array): Buffer {
  return createHash('sha512').update(Buffer.of(0)).update(data).digest();
}

function nodeHash(l: Buffer, r: Buffer): Buffer {
  return createHash('sha512').update(Buffer.of(1)).update(l).update(r).digest();
}

/** Root over precomputed leaf hashes. */
export function rootFromLeafHashes(leaves: Buffer[]): Buffer {
  if (leaves.length === 0) return createHash('sha512').digest();
  const rec = (lo: number, hi: number): Buffer => {
    const n = hi - lo;
    if (n === 1) return leaves[lo]!;
    let k = 1;
    while (k * 2 < n) k *= 2;
    return nodeHash(rec(lo, lo + k), rec(lo + k, hi));
  };
  return rec(0, leaves.length);
}
