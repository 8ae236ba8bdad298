// Node-only CryptoProvider on node:crypto (OpenSSL): one-shot crypto.hash()
// and crypto.verify() with raw Ed25519 keys wrapped in a DER SubjectPublicKeyInfo.
// Gives the same verdicts as the default @noble provider (tested on the same
// vectors); never import this from the isomorphic verifier path.
import { createPublicKey, hash, verify, type KeyObject } from 'node:crypto';
import type { CryptoProvider } from '../proof/index.js';

// SEQUENCE { SEQUENCE { OID 1.3.101.112 (Ed25519) } BIT STRING (32 bytes) }
const ED25519_SPKI_PREFIX = Uint8Array.from([0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00]);

export interface NodeCryptoOptions {
  /**
   * Keep parsed public KeyObjects per distinct key (bounded). Saves the DER
   * parse when many proofs share a key (managed authorities); verdicts are
   * never cached.
   */
  cacheKeys?: boolean;
  /** Cache bound; the cache is cleared when full. */
  maxCachedKeys?: number;
}

function spki(publicKey: Uint8Array): Uint8Array {
  const der = new Uint8Array(ED25519_SPKI_PREFIX.length + publicKey.length);
  der.set(ED25519_SPKI_PREFIX, 0);
  der.set(publicKey, ED25519_SPKI_PREFIX.length);
  return der;
}

function keyObject(publicKey: Uint8Array): KeyObject {
  return createPublicKey({ key: Buffer.from(spki(publicKey)), format: 'der', type: 'spki' });
}

export function createNodeCrypto(opts: NodeCryptoOptions = {}): CryptoProvider {
  const cache = opts.cacheKeys ? new Map<string, KeyObject>() : undefined;
  const max = opts.maxCachedKeys ?? 4096;
  const keyFor = (publicKey: Uint8Array): KeyObject => {
    if (cache === undefined) return keyObject(publicKey);
    const id = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('latin1');
    let k = cache.get(id);
    if (k === undefined) {
      if (cache.size >= max) cache.clear();
      k = keyObject(publicKey);
      cache.set(id, k);
    }
    return k;
  };
  return {
    sha512: (data) => hash('sha512', data, 'buffer'),
    sha512Utf8Hex: (text) => hash('sha512', text, 'hex'),
    ed25519Verify(signature, message, publicKey) {
      if (publicKey.length !== 32 || signature.length !== 64) return false;
      try {
        return verify(null, message, keyFor(publicKey), signature);
      } catch {
        return false; // a key OpenSSL cannot decode is a plain "no"
      }
    },
  };
}

/** Uncached node:crypto provider. */
export const nodeCrypto: CryptoProvider = createNodeCrypto();
