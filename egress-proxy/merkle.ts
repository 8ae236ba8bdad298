// Incremental RFC 6962 Merkle Tree Hash with SHA-512 (CONTRACT.md section 5
// rules: leaf = H(0x00 || data), node = H(0x01 || l || r), empty = H("")).
// Streams can be long, so leaves are folded into a stack of perfect subtrees
// (O(log n) memory) instead of being kept.
// NOTE: local stand-in until shared/proof/merkle.ts lands; the shared
// merkleRoot over the same leaf data must give the same root (tested).
import { createHash } from 'node:crypto';

const h = (...parts: Uint8Array[]): Buffer => {
  const x = createHash('sha512');
  for (const p of parts) x.update(p);
  return x.digest();
};
const LEAF = Uint8Array.of(0);
const NODE = Uint8Array.of(1);

export class MerkleAccumulator {
  /** Perfect subtrees, left to right, strictly decreasing sizes. */
  #stack: { size: number; hash: Buffer }[] = [];
  #count = 0;

  get count(): number { return this.#count; }

  push(leafData: Uint8Array): void {
    let node = { size: 1, hash: h(LEAF, leafData) };
    let top = this.#stack.at(-1);
    while (top && top.size === node.size) {
      this.#stack.pop();
      node = { size: top.size * 2, hash: h(NODE, top.hash, node.hash) };
      top = this.#stack.at(-1);
    }
    this.#stack.push(node);
    this.#count++;
  }

  /** Root over all leaves so far; folding right to left reproduces RFC 6962's split at the largest power of two. */
  root(): Buffer {
    if (this.#stack.length === 0) return h();
    let acc = (this.#stack.at(-1) as { hash: Buffer }).hash;
    for (let i = this.#stack.length - 2; i >= 0; i--) acc = h(NODE, (this.#stack[i] as { hash: Buffer }).hash, acc);
    return acc;
  }
}

/** Whole-list form (for tests and small inputs). */
export function merkleRootSha512(leaves: readonly Uint8Array[]): Buffer {
  const m = new MerkleAccumulator();
  for (const l of leaves) m.push(l);
  return m.root();
}
