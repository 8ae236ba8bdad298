// Streamed responses are recorded in segments, not one event per chunk
// (docs/EGRESS.md section 5, "Streams"). The leaves stay the chunk digests of
// RFC 6962's Merkle Tree Hash (SHA-512). A segment is a run of 2^k
// consecutive chunks starting at a multiple of 2^k (the stream's last segment
// may be shorter): a complete subtree of that tree, so its root is a node of
// it and the segment roots fold into the root over all chunks.
// Segment sizes start at one chunk and double after SEGMENTS_PER_LEVEL
// segments of a size (one more when needed to reach the doubled alignment):
// a stream of n chunks gives O(log n) segment events, whatever n is.
import { createHash } from 'node:crypto';
import { MerkleAccumulator } from '../shared/proof/index.js';
import { nodeCrypto } from '../shared/node/crypto-node.js';

/** Segments of one size before the size doubles. */
export const SEGMENTS_PER_LEVEL = 4;

export interface Segment {
  /** 0-based segment number within the exchange. */
  index: number;
  /** Index of the segment's first chunk. */
  firstChunk: number;
  chunks: number;
  bytes: number;
  /** RFC 6962 root (SHA-512) over the segment's chunk digests: 64 bytes. */
  root: Buffer;
}

/** The segment schedule alone (no hashing): sizes of the segments that n chunks make. Pure. */
export class SegmentSchedule {
  #level = 0;
  #atLevel = 0;
  #start = 0;

  /** Capacity (in chunks) of the segment now open. */
  get capacity(): number {
    return 2 ** this.#level;
  }

  /** Records that the open segment closed with `chunks` chunks (== capacity unless it is the last). */
  closed(chunks: number): void {
    this.#start += chunks;
    this.#atLevel++;
    const next = 2 ** (this.#level + 1);
    if (this.#atLevel >= SEGMENTS_PER_LEVEL && this.#start % next === 0) {
      this.#level++;
      this.#atLevel = 0;
    }
  }
}

/** Number of segments a stream of `chunks` chunks is recorded in (for the documented bound and its test). */
export function segmentCount(chunks: number): number {
  const s = new SegmentSchedule();
  let left = chunks;
  let n = 0;
  while (left > 0) {
    const take = Math.min(left, s.capacity);
    s.closed(take);
    left -= take;
    n++;
  }
  return n;
}

const sha512 = (b: Uint8Array): Buffer => createHash('sha512').update(b).digest();

/** Folds aligned subtree roots, left to right, into RFC 6962's root (a compact range). */
class SubtreeStack {
  #stack: { size: number; hash: Buffer }[] = [];

  push(hash: Buffer, size: number): void {
    let node = { size, hash };
    let top = this.#stack.at(-1);
    while (top !== undefined && top.size === node.size) {
      this.#stack.pop();
      node = { size: top.size * 2, hash: sha512(Buffer.concat([NODE, top.hash, node.hash])) };
      top = this.#stack.at(-1);
    }
    this.#stack.push(node);
  }

  root(): Buffer {
    const top = this.#stack.at(-1);
    if (top === undefined) return sha512(new Uint8Array(0));
    let acc = top.hash;
    for (let i = this.#stack.length - 2; i >= 0; i--) acc = sha512(Buffer.concat([NODE, this.#stack[i]!.hash, acc]));
    return acc;
  }
}
const NODE = Buffer.of(0x01);

/** Accumulates chunk digests into segments; O(log n) memory. */
export class SegmentedStream {
  readonly #schedule = new SegmentSchedule();
  readonly #all = new SubtreeStack();
  #open = new MerkleAccumulator(nodeCrypto);
  #openBytes = 0;
  #first = 0;
  #index = 0;
  #chunks = 0;

  get chunks(): number {
    return this.#chunks;
  }

  get segments(): number {
    return this.#index;
  }

  /** Adds one chunk (its raw 64-byte SHA-512); returns the segment it completed, if any. */
  push(digest: Uint8Array, bytes: number): Segment | null {
    this.#open.push(digest);
    this.#openBytes += bytes;
    this.#chunks++;
    return this.#open.count >= this.#schedule.capacity ? this.#close() : null;
  }

  /** Closes the last, possibly shorter, segment (null when nothing is open). */
  end(): Segment | null {
    return this.#open.count > 0 ? this.#close() : null;
  }

  /** RFC 6962 root over every chunk pushed so far, from the closed segments' roots. Call after end(). */
  root(): Buffer {
    return this.#all.root();
  }

  #close(): Segment {
    const root = Buffer.from(this.#open.root());
    const seg: Segment = {
      index: this.#index++,
      firstChunk: this.#first,
      chunks: this.#open.count,
      bytes: this.#openBytes,
      root,
    };
    this.#all.push(root, seg.chunks);
    this.#schedule.closed(seg.chunks);
    this.#first += seg.chunks;
    this.#open = new MerkleAccumulator(nodeCrypto);
    this.#openBytes = 0;
    return seg;
  }
}

/**
 * For verifiers: the root over all chunks from the recorded segments
 * (`first_chunk`, `chunks`, `segment_root` of each StreamingEgressChunk, in
 * order). Throws when the segments are not contiguous aligned subtrees, since
 * then no RFC 6962 root follows from them.
 */
export function combineSegmentRoots(segments: { firstChunk: number; chunks: number; root: Uint8Array }[]): Buffer {
  const stack = new SubtreeStack();
  let next = 0;
  segments.forEach((s, i) => {
    const last = i === segments.length - 1;
    const pow2 = s.chunks > 0 && (s.chunks & (s.chunks - 1)) === 0;
    if (s.firstChunk !== next) throw new Error(`segment ${i}: starts at chunk ${s.firstChunk}, expected ${next}`);
    if (!Number.isSafeInteger(s.chunks) || s.chunks < 1) throw new Error(`segment ${i}: no chunks`);
    if (!last && (!pow2 || s.firstChunk % s.chunks !== 0))
      throw new Error(`segment ${i}: not an aligned power-of-two run of chunks`);
    // The last segment may be short, but must not straddle a larger subtree boundary.
    let lowbit = s.firstChunk === 0 ? Infinity : 1;
    while (lowbit !== Infinity && s.firstChunk % (lowbit * 2) === 0) lowbit *= 2;
    if (last && s.chunks > lowbit) throw new Error(`segment ${i}: crosses a subtree boundary`);
    stack.push(Buffer.from(s.root), s.chunks);
    next += s.chunks;
  });
  return stack.root();
}
