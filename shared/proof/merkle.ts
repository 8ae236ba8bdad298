// RFC 6962 Merkle Tree Hash with SHA-512 in place of SHA-256 (docs/PROOF_FORMAT.md "Activity root"):
// leaf = H(0x00 || d), node = H(0x01 || left || right), split at the largest
// power of two below n, empty tree = H(""). Used for the activity root and by
// the runner and egress proxy over data chunks.
// The activity root (verifier hot path) keeps hashes as binary strings and
// rebuilds a node's input in one reused buffer; data-level roots (wipe
// regions, egress chunks) use the incremental MerkleAccumulator.
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { canonicalize } from './jcs.js';
import { binaryInto, binaryToHex } from './encoding.js';

const EMPTY = new Uint8Array(0);

/** Merkle Tree Hash over raw leaf data; returns the 64-byte root. */
export function merkleRoot(leaves: Uint8Array[], provider?: CryptoProvider): Uint8Array {
  const acc = new MerkleAccumulator(provider);
  for (const leaf of leaves) acc.push(leaf);
  return acc.root();
}

// One node input buffer for all calls (a fresh 129-byte array lives off the
// V8 heap and costs about as much as a hash). Never escapes rootHexOfBinaryLeaves.
const NODE_SCRATCH = new Uint8Array(129);

/** Activity root over already-canonicalized events (JCS strings), serialized `sha512:<hex>`. */
export function activityRootOfCanonical(h: Hasher, canonicalEvents: string[]): string {
  return 'sha512:' + activityRootHexOfCanonical(h, canonicalEvents);
}

/** The hex part of the activity root (no prefix). */
export function activityRootHexOfCanonical(h: Hasher, canonicalEvents: string[]): string {
  const leaves: string[] = new Array<string>(canonicalEvents.length);
  // "\u0000" + JCS is exactly 0x00 || UTF-8(JCS).
  for (let i = 0; i < leaves.length; i++) leaves[i] = h.sha512Binary('\u0000' + canonicalEvents[i]!);
  return rootHexOfBinaryLeaves(h, leaves);
}

/**
 * Root (hex) over leaf hashes given as binary strings (one char per byte):
 * copying 64 chars into the node input is several times cheaper than
 * decoding 128 hex digits. Bottom-up pairing that promotes an odd last node
 * unchanged builds exactly RFC 6962's tree (the left subtree is always the
 * largest power of two), without recursion. Only the root is produced as hex.
 */
function rootHexOfBinaryLeaves(h: Hasher, leafHashes: string[]): string {
  if (leafHashes.length === 0) return h.sha512Hex(EMPTY);
  if (leafHashes.length === 1) return binaryToHex(leafHashes[0]!);
  const scratch = NODE_SCRATCH;
  scratch[0] = 0x01; // node domain byte
  let nodes = leafHashes;
  while (nodes.length > 2) {
    const next: string[] = [];
    for (let i = 0; i + 1 < nodes.length; i += 2) {
      binaryInto(nodes[i]!, scratch, 1);
      binaryInto(nodes[i + 1]!, scratch, 65);
      next.push(h.sha512Binary(scratch));
    }
    if (nodes.length % 2 === 1) next.push(nodes[nodes.length - 1]!);
    nodes = next;
  }
  binaryInto(nodes[0]!, scratch, 1);
  binaryInto(nodes[1]!, scratch, 65);
  return h.sha512Hex(scratch);
}

/** Activity root of events (each JCS-canonicalized); throws JcsError on non-JSON events. */
export function activityRoot(events: readonly unknown[], provider?: CryptoProvider): string {
  return activityRootOfCanonical(
    hasher(provider),
    events.map((e) => canonicalize(e)),
  );
}

const LEAF_PREFIX = Uint8Array.of(0x00);

function concat(...parts: Uint8Array[]): Uint8Array {
  let n = 0;
  for (const p of parts) n += p.length;
  const out = new Uint8Array(n);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}

/** RFC 6962 leaf hash H(0x00 || data), 64 bytes. */
export function merkleLeafHash(data: Uint8Array, provider?: CryptoProvider): Uint8Array {
  return hasher(provider).sha512(concat(LEAF_PREFIX, data));
}

/**
 * Incremental Merkle Tree Hash for streams (egress chunks, wiped regions):
 * leaves are folded into a stack of perfect subtrees, O(log n) memory.
 * Folding the stack right to left reproduces RFC 6962's split at the largest
 * power of two, so the root equals merkleRoot over the same leaves.
 */
export class MerkleAccumulator {
  readonly #h: Hasher;
  #stack: { size: number; hash: Uint8Array }[] = [];
  #count = 0;
  readonly #node = new Uint8Array(129);

  constructor(provider?: CryptoProvider) {
    this.#h = hasher(provider);
    this.#node[0] = 0x01; // node domain byte
  }

  get count(): number {
    return this.#count;
  }

  /** Adds a leaf by its data. */
  push(leafData: Uint8Array): void {
    this.pushLeafHash(this.#h.sha512(concat(LEAF_PREFIX, leafData)));
  }

  /** Adds a leaf by its precomputed leaf hash (lets callers reuse the hash of identical leaves). */
  pushLeafHash(leafHash: Uint8Array): void {
    let node = { size: 1, hash: leafHash };
    let top = this.#stack.at(-1);
    while (top !== undefined && top.size === node.size) {
      this.#stack.pop();
      node = { size: top.size * 2, hash: this.#pair(top.hash, node.hash) };
      top = this.#stack.at(-1);
    }
    this.#stack.push(node);
    this.#count++;
  }

  /** Root over the leaves so far (64 bytes); the empty tree is H(""). */
  root(): Uint8Array {
    const top = this.#stack.at(-1);
    if (top === undefined) return this.#h.sha512(EMPTY);
    let acc = top.hash;
    for (let i = this.#stack.length - 2; i >= 0; i--) acc = this.#pair(this.#stack[i]!.hash, acc);
    return acc;
  }

  #pair(left: Uint8Array, right: Uint8Array): Uint8Array {
    this.#node.set(left, 1);
    this.#node.set(right, 65);
    return this.#h.sha512(this.#node);
  }
}
