// Isolation layer 0: multi-pass overwrite of every byte held in the capsule
// tmpfs at destroy time. Per 1 MiB region of each regular file's data:
//   zeros -> ones -> random (AES-256-CTR keystream under the capsule key;
//   os.urandom for sparse files, see sparse.ts) -> read back == random ->
//   zeros -> read back == zeros
// and the Merkle root (RFC 6962, SHA-512) over the read-back zero regions.
// Each inode is wiped once (hard links are names of one inode), only the
// pages a file holds are written (a sparse file's holes are not), and never
// more bytes than the tmpfs can hold: bytes_overwritten is bytes that existed.
//
// WARNING: runs as root over a tree the capsule user controlled. The walk is
// directory-relative (walk.ts); every open is O_NOFOLLOW|O_NONBLOCK and
// re-checked with fstat: symlinks, FIFOs and devices are never followed or
// written. All capsule processes must be dead first.
import { createCipheriv } from 'node:crypto';
import { closeSync, constants, fstatSync, openSync, readSync, statfsSync, writeSync } from 'node:fs';
import type { WipeReport } from '../shared/runner-protocol.js';
import { MerkleAccumulator, merkleLeafHash, toHex } from '../shared/proof/index.js';
import { nodeCrypto } from '../shared/node/crypto-node.js';
import { wipeSparse } from './sparse.js';
import { atPath, errCode, walkTree } from './walk.js';

export const REGION_BYTES = 1024 * 1024;
export const WIPE_PASSES = ['zeros', 'ones', 'random', 'zeros'];

const ZEROS = Buffer.alloc(REGION_BYTES, 0x00);
const ONES = Buffer.alloc(REGION_BYTES, 0xff);
/** Leaf hash of `len` zero bytes, by len: a pure function, so computed once per process. */
const ZERO_LEAVES = new Map<number, Uint8Array>();

export interface WipeOptions {
  /**
   * Wipe sparse files through the extent helper (sparse.ts; default). false:
   * the fallback used when the helper cannot run, which writes whole files
   * (holes included) and so can meet ENOSPC; tests use it to exercise that path.
   */
  sparseHelper?: boolean;
}

export interface WipeOutcome {
  report: WipeReport;
  regions: number;
  /** Entries that are not regular files (symlinks, FIFOs, sockets, devices): counted, never followed. */
  skipped_non_regular: number;
  /** Names of an inode already wiped (hard links): each inode is wiped once. */
  hard_links_deduplicated: number;
  /** Files and directories whose bytes were not (all) overwritten. */
  not_overwritten: number;
  /** Aggregated problems, "<what>: <errno> (<count>)", without customer names. */
  errors: string[];
  /** A human sentence when something was not overwritten or did not read back, else null. */
  reason: string | null;
  /** statfs of the tmpfs before the wipe: what it can hold and what was in use. */
  tmpfs_capacity_bytes: number;
  tmpfs_used_bytes: number;
}

const PAGE = 4096n;
const SPARSE_BATCH = 64;
const RW_FLAGS = constants.O_RDWR | constants.O_NOFOLLOW | constants.O_NONBLOCK;

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

function zeroLeaf(len: number): Uint8Array {
  let h = ZERO_LEAVES.get(len);
  if (!h) {
    h = merkleLeafHash(ZEROS.subarray(0, len), nodeCrypto);
    if (ZERO_LEAVES.size < 256) ZERO_LEAVES.set(len, h); // bounded: a few common lengths
  }
  return h;
}

/**
 * Wipes every regular file under root, each inode once, only the pages it
 * holds, never more than the tmpfs can hold. key: the capsule's 32-byte key,
 * used only as the keystream key of the random pass of dense files (the
 * caller zeroizes it). Synchronous: run it off the serving event loop
 * (offloop.ts), except at start-up recovery.
 */
export function wipeTree(root: string, key: Buffer, opts: WipeOptions = {}): WipeOutcome {
  const useHelper = opts.sparseHelper !== false;
  let capacity = 0;
  let used = 0;
  try {
    const sf = statfsSync(root);
    capacity = sf.blocks * sf.bsize;
    used = (sf.blocks - sf.bfree) * sf.bsize;
  } catch {
    /* the walk reports the same failure */
  }
  const readBuf = Buffer.allocUnsafe(REGION_BYTES);
  const problems = new Map<string, number>();
  let notOverwritten = 0;
  const problem = (what: string, code: string): void => {
    const k = `${what}: ${code}`;
    problems.set(k, (problems.get(k) ?? 0) + 1);
    notOverwritten++;
  };
  let bytes = 0;
  let verified = true;
  let skipped = 0;
  let dedup = 0;
  let wiped = 0;
  const seenInodes = new Set<number>();
  /** Leaf hashes per wiped file, in walk order (sparse files are wiped in batches, later). */
  const fileLeaves: Uint8Array[][] = [];
  let batch: { fd: number; ino: number; size: bigint; slot: number }[] = [];

  const wipeDense = (fd: number, size: number, slot: number): void => {
    const leaves: Uint8Array[] = [];
    fileLeaves[slot] = leaves;
    const iv = Buffer.alloc(16);
    iv.writeUInt32BE(slot, 0);
    const cipher = createCipheriv('aes-256-ctr', key, iv);
    try {
      for (let pos = 0; pos < size; pos += REGION_BYTES) {
        const len = Math.min(REGION_BYTES, size - pos);
        writeFull(fd, ZEROS, len, pos);
        writeFull(fd, ONES, len, pos);
        const rnd = cipher.update(ZEROS.subarray(0, len));
        writeFull(fd, rnd, len, pos);
        if (readFull(fd, readBuf, len, pos) !== len || !readBuf.subarray(0, len).equals(rnd)) verified = false;
        rnd.fill(0);
        writeFull(fd, ZEROS, len, pos);
        if (readFull(fd, readBuf, len, pos) !== len || !readBuf.subarray(0, len).equals(ZEROS.subarray(0, len))) {
          verified = false;
          leaves.push(merkleLeafHash(readBuf.subarray(0, len), nodeCrypto));
        } else leaves.push(zeroLeaf(len));
        bytes += len;
      }
      wiped++;
    } catch (e) {
      problem('wipe', errCode(e));
    } finally {
      cipher.final();
    }
  };

  const flushSparse = (): void => {
    const items = batch;
    batch = [];
    if (items.length === 0) return;
    const results = useHelper ? wipeSparse(items, Math.max(0, capacity - bytes)) : null;
    items.forEach((it, i) => {
      try {
        const r = results?.[i];
        if (r) {
          if (!r.ok) {
            problem(r.what, r.code);
            return;
          }
          if (!r.verified) verified = false;
          fileLeaves[it.slot] = r.regions.map((g) =>
            g.leafHex === null ? zeroLeaf(g.len) : Buffer.from(g.leafHex, 'hex'),
          );
          bytes += r.bytes;
          wiped++;
          return;
        }
        // No extent helper: write the whole file if it fits the tmpfs. Its holes get allocated (may meet
        // ENOSPC); every byte counted then sits in a page of its own, so the total stays within the tmpfs.
        if (it.size > BigInt(capacity) || bytes >= capacity) {
          problem('sparse file larger than the tmpfs, no extent map', 'EFBIG');
          return;
        }
        wipeDense(it.fd, Number(it.size), it.slot);
      } finally {
        closeSync(it.fd);
      }
    });
  };

  walkTree(root, {
    other: () => {
      skipped++;
    },
    problem,
    file: (dirFd, name) => {
      let fd: number;
      try {
        fd = openSync(atPath(dirFd, name), RW_FLAGS);
      } catch (e) {
        if (errCode(e) === 'ELOOP')
          skipped++; // became a symlink: never followed
        else problem('open', errCode(e));
        return;
      }
      let keep = false;
      try {
        const st = fstatSync(fd, { bigint: true });
        if (!st.isFile()) {
          skipped++;
          return;
        }
        const ino = Number(st.ino);
        if (seenInodes.has(ino)) {
          dedup++;
          return;
        }
        seenInodes.add(ino);
        const slot = fileLeaves.length;
        fileLeaves.push([]);
        const pages = (st.size + PAGE - 1n) / PAGE;
        // Dense: every page up to EOF is allocated and none beyond (st_blocks counts 512-byte units).
        if (st.blocks * 512n === pages * PAGE && st.size <= BigInt(capacity)) {
          wipeDense(fd, Number(st.size), slot);
          return;
        }
        batch.push({ fd, ino, size: st.size, slot });
        keep = true;
        if (batch.length >= SPARSE_BATCH) flushSparse();
      } catch (e) {
        problem('stat', errCode(e));
      } finally {
        if (!keep) closeSync(fd);
      }
    },
  });
  flushSparse();
  readBuf.fill(0);
  const leaves = new MerkleAccumulator(nodeCrypto);
  for (const list of fileLeaves) for (const h of list) leaves.pushLeafHash(h);
  const errors = [...problems.entries()].map(([k, n]) => `${k} (${n})`);
  const reasons: string[] = [];
  if (notOverwritten > 0) {
    const byCode = new Map<string, number>();
    for (const [k, n] of problems) {
      const code = k.slice(k.lastIndexOf(': ') + 2);
      byCode.set(code, (byCode.get(code) ?? 0) + n);
    }
    const codes = [...byCode.entries()].map(([c, n]) => (byCode.size === 1 ? c : `${c} (${n})`));
    reasons.push(
      `${notOverwritten} ${notOverwritten === 1 ? 'entry' : 'entries'} not overwritten: ${codes.join(', ')}`,
    );
  }
  if (!verified) reasons.push('some wiped regions did not read back as written');
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
    hard_links_deduplicated: dedup,
    not_overwritten: notOverwritten,
    errors,
    reason: reasons.length > 0 ? reasons.join('; ') : null,
    tmpfs_capacity_bytes: capacity,
    tmpfs_used_bytes: used,
  };
}

/**
 * wipeTree, then overwrites key with zeros however the wipe ends (also when
 * it throws), and reads the key back: the one way the runner wipes with a key.
 */
export function wipeAndZeroize(
  root: string,
  key: Buffer,
  opts: WipeOptions = {},
): WipeOutcome & { keyReadbackZero: boolean } {
  let out: WipeOutcome;
  try {
    out = wipeTree(root, key, opts);
  } finally {
    key.fill(0);
  }
  return { ...out, keyReadbackZero: key.every((b) => b === 0) };
}
