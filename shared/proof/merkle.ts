// RFC 6962 Merkle Tree Hash with SHA-512 in place of SHA-256 (CONTRACT section 5):
// leaf = H(0x00 || d), node = H(0x01 || left || right), split at the largest
// power of two below n, empty tree = H(""). Used for the activity root and by
// the runner and egress proxy over data chunks.
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { canonicalize } from './jcs.js';
import { toHex, utf8 } from './encoding.js';

/** Merkle Tree Hash over raw leaf data; returns the 64-byte root. */
export function merkleRoot(leaves: Uint8Array[], provider?: CryptoProvider): Uint8Array {
  const h = hasher(provider);
  if (leaves.length === 0) return h.sha512(new Uint8Array(0));
  return merkleRootOfLeafHashes(h, leaves.map((d) => leafHash(h, d)));
}

export function leafHash(h: Hasher, data: Uint8Array): Uint8Array {
  const buf = new Uint8Array(data.length + 1);
  buf[0] = 0x00;
  buf.set(data, 1);
  return h.sha512(buf);
}

function nodeHash(h: Hasher, left: Uint8Array, right: Uint8Array): Uint8Array {
  const buf = new Uint8Array(1 + left.length + right.length);
  buf[0] = 0x01;
  buf.set(left, 1);
  buf.set(right, 1 + left.length);
  return h.sha512(buf);
}

/**
 * Root over already-hashed leaves (at least one). Bottom-up pairing that
 * promotes an odd last node unchanged builds exactly RFC 6962's tree (the
 * left subtree is always the largest power of two), without recursion.
 */
export function merkleRootOfLeafHashes(h: Hasher, level: Uint8Array[]): Uint8Array {
  if (level.length === 0) return h.sha512(new Uint8Array(0));
  let nodes = level;
  while (nodes.length > 1) {
    const next: Uint8Array[] = [];
    for (let i = 0; i + 1 < nodes.length; i += 2) next.push(nodeHash(h, nodes[i]!, nodes[i + 1]!));
    if (nodes.length % 2 === 1) next.push(nodes[nodes.length - 1]!);
    nodes = next;
  }
  return nodes[0]!;
}

/** Activity root over already-canonicalized events (JCS strings), serialized `sha512:<hex>`. */
export function activityRootOfCanonical(h: Hasher, canonicalEvents: string[]): string {
  const leaves = canonicalEvents.map((c) => leafHash(h, utf8(c)));
  return 'sha512:' + toHex(merkleRootOfLeafHashes(h, leaves));
}

/** Activity root of events (each JCS-canonicalized); throws JcsError on non-JSON events. */
export function activityRoot(events: readonly unknown[], provider?: CryptoProvider): string {
  return activityRootOfCanonical(hasher(provider), events.map((e) => canonicalize(e)));
}
