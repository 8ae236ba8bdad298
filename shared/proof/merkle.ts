// RFC 6962 Merkle Tree Hash with SHA-512 in place of SHA-256 (CONTRACT section 5):
// leaf = H(0x00 || d), node = H(0x01 || left || right), split at the largest
// power of two below n, empty tree = H(""). Used for the activity root and by
// the runner and egress proxy over data chunks.
// Hashes travel as hex internally: hex output is the cheapest result form of
// the providers, and a node's input is rebuilt in one reused buffer.
import { hasher, type CryptoProvider, type Hasher } from './crypto.js';
import { canonicalize } from './jcs.js';
import { fromHex, hexInto } from './encoding.js';

const EMPTY = new Uint8Array(0);

/** Merkle Tree Hash over raw leaf data; returns the 64-byte root. */
export function merkleRoot(leaves: Uint8Array[], provider?: CryptoProvider): Uint8Array {
  const h = hasher(provider);
  const leafHashes = leaves.map((d) => {
    const buf = new Uint8Array(d.length + 1);
    buf.set(d, 1); // buf[0] = 0x00, the leaf domain byte
    return h.sha512Hex(buf);
  });
  return fromHex(merkleRootHex(h, leafHashes))!;
}

/**
 * Root (hex) over leaf hashes (hex). Bottom-up pairing that promotes an odd
 * last node unchanged builds exactly RFC 6962's tree (the left subtree is
 * always the largest power of two), without recursion.
 */
export function merkleRootHex(h: Hasher, leafHashes: string[]): string {
  if (leafHashes.length === 0) return h.sha512Hex(EMPTY);
  const scratch = new Uint8Array(129);
  scratch[0] = 0x01; // node domain byte
  let nodes = leafHashes;
  while (nodes.length > 1) {
    const next: string[] = [];
    for (let i = 0; i + 1 < nodes.length; i += 2) {
      hexInto(nodes[i]!, scratch, 1);
      hexInto(nodes[i + 1]!, scratch, 65);
      next.push(h.sha512Hex(scratch));
    }
    if (nodes.length % 2 === 1) next.push(nodes[nodes.length - 1]!);
    nodes = next;
  }
  return nodes[0]!;
}

/** Activity root over already-canonicalized events (JCS strings), serialized `sha512:<hex>`. */
export function activityRootOfCanonical(h: Hasher, canonicalEvents: string[]): string {
  // "\u0000" + JCS is exactly 0x00 || UTF-8(JCS).
  return 'sha512:' + merkleRootHex(h, canonicalEvents.map((c) => h.sha512Utf8Hex('\u0000' + c)));
}

/** Activity root of events (each JCS-canonicalized); throws JcsError on non-JSON events. */
export function activityRoot(events: readonly unknown[], provider?: CryptoProvider): string {
  return activityRootOfCanonical(hasher(provider), events.map((e) => canonicalize(e)));
}
