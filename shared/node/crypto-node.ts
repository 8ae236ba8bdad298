// Node-only CryptoProvider on node:crypto (OpenSSL): one-shot crypto.hash()
// and crypto.verify() with raw 32-byte Ed25519 public keys, imported as
// `raw-public` where this Node has it (about half the import cost of DER),
// otherwise wrapped in a DER SubjectPublicKeyInfo. Gives the same verdicts as
// the default @noble provider (tested on the same vectors); never import this
// from the isomorphic verifier path.
import { createPrivateKey, createPublicKey, hash, sign, verify, type KeyObject } from 'node:crypto';
import type { CryptoProvider } from '../proof/index.js';

// SEQUENCE { SEQUENCE { OID 1.3.101.112 (Ed25519) } BIT STRING (32 bytes) }
const ED25519_SPKI_PREFIX = Buffer.from('302a300506032b6570032100', 'hex');
// PKCS#8: SEQUENCE { INTEGER 0, SEQUENCE { OID 1.3.101.112 }, OCTET STRING { OCTET STRING (32-byte seed) } }
const ED25519_PKCS8_PREFIX = Buffer.from('302e020100300506032b657004220420', 'hex');

// The Ed25519 base point: a valid key to probe the import format with.
const BASE_POINT = Buffer.from('5866666666666666666666666666666666666666666666666666666666666666', 'hex');

type KeyInput =
  | KeyObject
  | { key: Buffer; format: 'der'; type: 'spki' }
  | { key: Buffer; format: 'raw-public'; asymmetricKeyType: 'ed25519' };

const rawPublicSupported = ((): boolean => {
  try {
    createPublicKey({ key: BASE_POINT, format: 'raw-public', asymmetricKeyType: 'ed25519' } as unknown as Parameters<
      typeof createPublicKey
    >[0]);
    return true;
  } catch {
    return false;
  }
})();

/**
 * An OpenSSL key from a 32-byte seed. The DER copy is zeroed at once; OpenSSL
 * keeps Ed25519 private keys in its secure heap and clears them when the
 * KeyObject is collected (not measured here, so nothing claims it).
 */
function privateKeyOf(seed: Uint8Array): KeyObject {
  if (seed.length !== 32) throw new RangeError('Ed25519 seed must be 32 bytes');
  const der = Buffer.alloc(ED25519_PKCS8_PREFIX.length + 32);
  ED25519_PKCS8_PREFIX.copy(der);
  der.set(seed, ED25519_PKCS8_PREFIX.length);
  try {
    return createPrivateKey({ key: der, format: 'der', type: 'pkcs8' });
  } finally {
    der.fill(0);
  }
}

/** A key description crypto.verify accepts, without creating a KeyObject. */
function keyInput(publicKey: Uint8Array, rawPublic: boolean): KeyInput {
  const raw = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength);
  return rawPublic
    ? { key: raw, format: 'raw-public', asymmetricKeyType: 'ed25519' }
    : { key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: 'der', type: 'spki' };
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export interface NodeCryptoOptions {
  /**
   * Keep parsed public KeyObjects per distinct key (bounded). Saves the key
   * import when many proofs share a key (managed authorities); it does not
   * help ephemeral keys, which are one per proof. Verdicts are never cached.
   */
  cacheKeys?: boolean;
  /** Cache bound; the cache is cleared when full. */
  maxCachedKeys?: number;
  /** Force the DER SubjectPublicKeyInfo import (the path of Nodes without `raw-public`); for tests. */
  keyImport?: 'auto' | 'der-spki';
}

export function createNodeCrypto(opts: NodeCryptoOptions = {}): CryptoProvider {
  const cache = opts.cacheKeys ? new Map<string, KeyObject>() : undefined;
  const max = opts.maxCachedKeys ?? 4096;
  const rawPublic = rawPublicSupported && opts.keyImport !== 'der-spki';
  // The most recently used key, checked byte by byte before the Map lookup:
  // runs of proofs under one key (a managed authority) skip building the Map key.
  let lastRaw: Uint8Array | undefined;
  let lastKey: KeyObject | undefined;
  const keyFor = (publicKey: Uint8Array): KeyInput => {
    if (cache === undefined) return keyInput(publicKey, rawPublic);
    if (lastKey !== undefined && sameBytes(lastRaw!, publicKey)) return lastKey;
    const id = Buffer.from(publicKey.buffer, publicKey.byteOffset, publicKey.byteLength).toString('latin1');
    let k = cache.get(id);
    if (k === undefined) {
      if (cache.size >= max) cache.clear();
      k = createPublicKey(keyInput(publicKey, rawPublic) as Parameters<typeof createPublicKey>[0]);
      cache.set(id, k);
    }
    lastRaw = Uint8Array.from(publicKey); // a copy: the caller may reuse its array
    lastKey = k;
    return k;
  };
  return {
    sha512: (data) => hash('sha512', data, 'buffer'),
    sha512Hex: (data) => hash('sha512', data, 'hex'), // hex output is several times cheaper than a Buffer
    sha512Utf8Hex: (text) => hash('sha512', text, 'hex'),
    sha512Binary: (data) => hash('sha512', data, 'binary'), // latin1: one char per byte, as cheap as hex
    // Signing for the emitter: about 0.05 ms against 0.6 (public key) and 1.6 ms (signature) in @noble's JS.
    ed25519Sign: (message, seed) => new Uint8Array(sign(null, message, privateKeyOf(seed))),
    ed25519PublicKey: (seed) =>
      new Uint8Array(
        createPublicKey(privateKeyOf(seed))
          .export({ format: 'der', type: 'spki' })
          .subarray(ED25519_SPKI_PREFIX.length),
      ),
    ed25519Verify(signature, message, publicKey) {
      if (publicKey.length !== 32 || signature.length !== 64) return false;
      try {
        return verify(null, message, keyFor(publicKey) as Parameters<typeof verify>[2], signature);
      } catch {
        return false; // a key OpenSSL cannot decode is a plain "no"
      }
    },
  };
}

/** Uncached node:crypto provider. */
export const nodeCrypto: CryptoProvider = createNodeCrypto();

/** Which import the provider uses for raw keys on this Node (reported by the benchmark). */
export const NODE_KEY_IMPORT: 'raw-public' | 'der-spki' = rawPublicSupported ? 'raw-public' : 'der-spki';
