// Isolation layer 0: multi-pass overwrite of every byte held in the capsule
// tmpfs at destroy time. Per 1 MiB region of each regular file:
//   zeros -> ones -> random (AES-256-CTR keystream under the capsule key) ->
//   read back == random -> zeros -> read back == zeros
// and the Merkle root (RFC 6962, SHA-512) over the read-back zero regions.
//
// WARNING: runs as root over a tree the capsule user controlled. Every open is
// O_NOFOLLOW|O_NONBLOCK and re-checked with fstat: symlinks, FIFOs and devices
// are never followed or written. All capsule processes must be dead first.
import { createCipheriv } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readdirSync, readSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import type { WipeReport } from '../shared/runner-protocol.js';
import { MerkleAccumulator, merkleLeafHash, toHex } from '../shared/proof/index.js';
import { nodeCrypto } from '../shared/node/crypto-node.js';

export const REGION_BYTES = 1024 * 1024;
export const WIPE_PASSES = ['zeros', 'ones', 'random', 'zeros'];

const ZEROS = Buffer.alloc(REGION_BYTES, 0x00);
const ONES = Buffer.alloc(REGION_BYTES, 0xff);
/** Leaf hash of `len` zero bytes, by len: a pure function, so computed once per process. */
const ZERO_LEAVES = new Map<number, Uint8Array>();

export interface WipeOutcome {
  report: WipeReport;
  regions: number;
  /** Regular files skipped because they could not be opened safely (counted, never followed). */
  skipped_non_regular: number;
  errors: string[];
}

/**
 * Relative paths of regular files (by lstat type) under dir, sorted for a
 * stable leaf order. Directories that cannot be read (e.g. paths beyond
 * PATH_MAX) are reported, so the wipe never claims a tree it did not see.
 */
function listFiles(dir: string): { files: string[]; other: number; unreadable: string[] } {
  const files: string[] = [];
  const unreadable: string[] = [];
  let other = 0;
  const stack = [''];
  while (stack.length > 0) {
    const rel = stack.pop()!;
    let entries;
    try {
      entries = readdirSync(join(dir, rel), { withFileTypes: true });
    } catch (e) {
      unreadable.push(`${rel || '.'}: ${(e as NodeJS.ErrnoException).code ?? 'error'}`);
      continue;
    }
    for (const e of entries) {
      const r = rel ? `${rel}/${e.name}` : e.name;
      if (e.isDirectory()) stack.push(r);
      else if (e.isFile()) files.push(r);
      else other++;
    }
  }
  return { files: files.sort(), other, unreadable };
}

function writeFull(fd: number, buf: Buffer, len: number, pos: number): void {
  let off = 0;
  while (off < len) off += writeSync(fd, buf, off, len - off, pos + off);
}

function readFull(fd: number, buf: Buffer, len: number, pos: number): number {
  let off = 0;
  while (off < len) {
    const n = readSync(fd, buf, off, len - off, pos + off);
    if (n === 0) break;
    off += n;
  }
  return off;
}

/**
 * Wipes every regular file under root. key: the capsule's 32-byte key, used
 * only as the keystream key of the random pass (the caller zeroizes it).
 */
export function wipeTree(root: string, key: Buffer): WipeOutcome {
  const { files, other, unreadable } = listFiles(root);
  const leaves = new MerkleAccumulator(nodeCrypto);
  const readBuf = Buffer.allocUnsafe(REGION_BYTES);
  const errors: string[] = unreadable.map((u) => `unreadable directory ${u}`);
  let bytes = 0;
  let verified = unreadable.length === 0;
  let skipped = other;
  let wiped = 0;
  files.forEach((rel, fileIndex) => {
    let fd: number;
    try {
      fd = openSync(join(root, rel), constants.O_RDWR | constants.O_NOFOLLOW | constants.O_NONBLOCK);
    } catch (e) {
      errors.push(`open ${rel}: ${(e as NodeJS.ErrnoException).code}`);
      verified = false;
      return;
    }
    try {
      const st = fstatSync(fd);
      if (!st.isFile()) {
        skipped++;
        return;
      }
      const iv = Buffer.alloc(16);
      iv.writeUInt32BE(fileIndex, 0);
      const cipher = createCipheriv('aes-256-ctr', key, iv);
      const size = st.size;
      for (let pos = 0; pos < size; pos += REGION_BYTES) {
        const len = Math.min(REGION_BYTES, size - pos);
        writeFull(fd, ZEROS, len, pos);
        writeFull(fd, ONES, len, pos);
        const rnd = cipher.update(ZEROS.subarray(0, len));
        writeFull(fd, rnd, len, pos);
        if (readFull(fd, readBuf, len, pos) !== len || !readBuf.subarray(0, len).equals(rnd)) verified = false;
        writeFull(fd, ZEROS, len, pos);
        if (readFull(fd, readBuf, len, pos) !== len || !readBuf.subarray(0, len).equals(ZEROS.subarray(0, len))) {
          verified = false;
          leaves.pushLeafHash(merkleLeafHash(readBuf.subarray(0, len), nodeCrypto));
        } else {
          // The region read back equal to `len` zero bytes: its leaf is the leaf of that buffer.
          let h = ZERO_LEAVES.get(len);
          if (!h) {
            h = merkleLeafHash(ZEROS.subarray(0, len), nodeCrypto);
            if (ZERO_LEAVES.size < 256) ZERO_LEAVES.set(len, h); // bounded: a few common lengths
          }
          leaves.pushLeafHash(h);
        }
        rnd.fill(0);
        bytes += len;
      }
      cipher.final();
      wiped++;
    } catch (e) {
      errors.push(`wipe ${rel}: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
      verified = false;
    } finally {
      closeSync(fd);
    }
  });
  readBuf.fill(0);
  return {
    report: {
      bytes_overwritten: bytes,
      files: wiped,
      passes: [...WIPE_PASSES],
      readback_verified: verified,
      zero_state_root: `sha512:${toHex(leaves.root())}`,
    },
    regions: leaves.count,
    skipped_non_regular: skipped,
    errors,
  };
}

/**
 * wipeTree, then overwrites key with zeros however the wipe ends (also when
 * it throws), and reads the key back: the one way the runner wipes with a key.
 */
export function wipeAndZeroize(root: string, key: Buffer): WipeOutcome & { keyReadbackZero: boolean } {
  let out: WipeOutcome;
  try {
    out = wipeTree(root, key);
  } finally {
    key.fill(0);
  }
  return { ...out, keyReadbackZero: key.every((b) => b === 0) };
}
