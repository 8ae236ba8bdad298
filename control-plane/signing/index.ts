// Managed-authority signer: Ed25519 keys from PKCS#8 PEM files, one per
// version (docs/CONTROL_PLANE.md "Signing authority"). Files are stat-ed on
// every use and re-read when they change, so rotation needs no restart. The
// key that signs is the highest version whose file is present; a file that
// is present but does not parse, or a once-loaded highest version that
// disappears, makes the key unavailable (never a silent fall back to an older one).
import { createPrivateKey, createPublicKey } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import type { SigningConfig } from '../config.js';
import type { KeyRecord, ManagedSigningKey, SignerPort, TrustManifest } from '../domain/index.js';

interface Loaded {
  /** mtime, size and inode of the file read; a change of any re-reads it. */
  stamp: string;
  seed: Buffer | null;
  publicKey: Buffer | null;
}

/** The 16-byte PKCS#8 prefix of an Ed25519 private key (RFC 8410 section 7); the 32-byte seed follows. */
const PKCS8_ED25519_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

export function authorityKeyId(authorityId: string, version: number): string {
  return `svc-authority-${authorityId}-v${version}`;
}

/** Parses one key file's bytes; null when it is not a PKCS#8 Ed25519 private key. Zeroizes its scratch. */
function parseKey(pem: Buffer): { seed: Buffer; publicKey: Buffer } | null {
  let der: Buffer | null = null;
  try {
    const key = createPrivateKey({ key: pem, format: 'pem' });
    if (key.asymmetricKeyType !== 'ed25519') return null;
    der = key.export({ format: 'der', type: 'pkcs8' });
    if (der.length !== 48 || !der.subarray(0, 16).equals(PKCS8_ED25519_PREFIX)) return null;
    const seed = Buffer.from(der.subarray(16));
    const spki = createPublicKey(key).export({ format: 'der', type: 'spki' });
    return { seed, publicKey: Buffer.from(spki.subarray(spki.length - 32)) };
  } catch {
    return null;
  } finally {
    der?.fill(0);
    pem.fill(0);
  }
}

export class FileSigner implements SignerPort {
  private readonly loaded = new Map<number, Loaded>();
  /** Public keys of every version read in this process: old proofs keep resolving after a file is retired. */
  private readonly seen = new Map<number, Buffer>();
  private readonly firstSeen = new Map<number, string>();
  private highestLoaded = 0;

  constructor(
    private readonly config: SigningConfig,
    private readonly nowIso: () => string,
  ) {
    this.refresh();
  }

  /** Re-reads changed files; returns the signing version or null (unavailable). */
  private refresh(): number | null {
    let signing: number | null = null;
    let broken = false;
    for (const { version, path } of this.config.keyFiles) {
      let stamp: string | null = null;
      try {
        const st = statSync(path);
        stamp = `${st.mtimeMs}:${st.size}:${st.ino}`;
      } catch {
        stamp = null;
      }
      const old = this.loaded.get(version);
      if (stamp === null) {
        if (old) this.drop(version);
        continue;
      }
      let cur = old;
      if (!old || old.stamp !== stamp) {
        if (old) this.drop(version);
        let parsed: { seed: Buffer; publicKey: Buffer } | null = null;
        try {
          parsed = parseKey(readFileSync(path));
        } catch {
          parsed = null;
        }
        cur = { stamp, seed: parsed?.seed ?? null, publicKey: parsed?.publicKey ?? null };
        this.loaded.set(version, cur);
        if (parsed) {
          this.seen.set(version, parsed.publicKey);
          if (!this.firstSeen.has(version)) this.firstSeen.set(version, this.nowIso());
        }
      }
      if (cur!.seed) {
        signing = version;
        broken = false;
        this.highestLoaded = Math.max(this.highestLoaded, version);
      } else {
        broken = true;
      }
    }
    // The highest version present must parse; a highest version once used must still be there.
    if (broken || signing === null || signing < this.highestLoaded) return null;
    return signing;
  }

  private drop(version: number): void {
    this.loaded.get(version)?.seed?.fill(0);
    this.loaded.delete(version);
  }

  withKey<T>(f: (key: ManagedSigningKey) => T): T | null {
    const version = this.refresh();
    if (version === null) return null;
    const l = this.loaded.get(version)!;
    const privateKey = Uint8Array.from(l.seed!);
    try {
      return f({
        signing_authority_id: this.config.authorityId,
        signing_key_version: version,
        key_id: authorityKeyId(this.config.authorityId, version),
        publicKey: Uint8Array.from(l.publicKey!),
        privateKey,
      });
    } finally {
      privateKey.fill(0);
    }
  }

  keyRecord(keyId: string): KeyRecord | null {
    this.refresh();
    for (const [version, pub] of this.seen) {
      if (authorityKeyId(this.config.authorityId, version) !== keyId) continue;
      return {
        key_id: keyId,
        algorithm: 'Ed25519',
        public_key: pub.toString('base64'),
        created_at: this.firstSeen.get(version)!,
        signing_authority_id: this.config.authorityId,
        signing_key_version: version,
      };
    }
    return null;
  }

  manifest(): TrustManifest {
    this.refresh();
    const keys = [...this.seen.entries()]
      .sort((a, b) => a[0] - b[0])
      .map(([v, pub]) => ({ signing_key_version: v, public_key: pub.toString('base64') }));
    return { authorities: [{ signing_authority_id: this.config.authorityId, keys }] };
  }

  close(): void {
    for (const v of [...this.loaded.keys()]) this.drop(v);
  }
}
