// Hash and signature primitives behind one small interface, so that the
// verifier runs on @noble (isomorphic, audited) by default and Node callers
// may pass a faster provider (shared/node/crypto-node.ts). Both must give the
// same verdict on every vector.
import * as ed from '@noble/ed25519';
import { sha256 as nobleSha256, sha512 as nobleSha512 } from '@noble/hashes/sha2.js';
import { toBinary, toHex, utf8 } from './encoding.js';

// noble's synchronous API needs its SHA-512 wired once, here and nowhere else
// (the @noble module is shared: the last assignment would win).
ed.hashes.sha512 = nobleSha512;

/**
 * Hash and signature primitives; default is @noble (isomorphic).
 * WARNING: calls are synchronous and the verifier reuses its buffers between
 * calls, so an implementation must not keep its arguments after returning.
 */
export interface CryptoProvider {
  sha512(data: Uint8Array): Uint8Array;
  ed25519Verify(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  /** Optional fast path: lower-case hex SHA-512 of the UTF-8 of `text`. */
  sha512Utf8Hex?(text: string): string;
  /** Optional fast path: lower-case hex SHA-512 of bytes. */
  sha512Hex?(data: Uint8Array): string;
  /** Optional fast path: SHA-512 of bytes, or of the UTF-8 of a string, as a binary string (one char per byte). */
  sha512Binary?(data: Uint8Array | string): string;
  /** Optional: Ed25519 signature with a 32-byte RFC 8032 seed (the emitter; deterministic, so the same bytes as noble). */
  ed25519Sign?(message: Uint8Array, seed: Uint8Array): Uint8Array;
  /** Optional: the Ed25519 public key of a 32-byte seed. */
  ed25519PublicKey?(seed: Uint8Array): Uint8Array;
}

/** The provider with every primitive filled in (its fast paths, else @noble's), as the proof code uses it. */
export interface Hasher {
  sha512(data: Uint8Array): Uint8Array;
  sha512Hex(data: Uint8Array): string;
  sha512Utf8Hex(text: string): string;
  sha512Binary(data: Uint8Array | string): string;
  ed25519Verify(signature: Uint8Array, message: Uint8Array, publicKey: Uint8Array): boolean;
  ed25519Sign(message: Uint8Array, seed: Uint8Array): Uint8Array;
  ed25519PublicKey(seed: Uint8Array): Uint8Array;
}

export const nobleCrypto: CryptoProvider = {
  sha512: (data) => nobleSha512(data),
  ed25519Verify(signature, message, publicKey) {
    // RFC 8032 strict branch (zip215: false): the same acceptance rule as
    // OpenSSL, so both providers agree. A malformed point is a plain "no".
    try {
      return ed.verify(signature, message, publicKey, { zip215: false });
    } catch {
      return false;
    }
  },
};

const cache = new WeakMap<CryptoProvider, Hasher>();

export function hasher(provider: CryptoProvider = nobleCrypto): Hasher {
  let h = cache.get(provider);
  if (!h) {
    const fastText = provider.sha512Utf8Hex?.bind(provider);
    const fastHex = provider.sha512Hex?.bind(provider);
    const fastBinary = provider.sha512Binary?.bind(provider);
    const sign = provider.ed25519Sign?.bind(provider) ?? ed25519Sign;
    const publicKey = provider.ed25519PublicKey?.bind(provider) ?? ed25519PublicKey;
    h = {
      sha512: (d) => provider.sha512(d),
      sha512Hex: fastHex ?? ((d) => toHex(provider.sha512(d))),
      sha512Utf8Hex: fastText ?? ((t) => toHex(provider.sha512(utf8(t)))),
      sha512Binary: fastBinary ?? ((d) => toBinary(provider.sha512(typeof d === 'string' ? utf8(d) : d))),
      ed25519Verify: (s, m, k) => provider.ed25519Verify(s, m, k),
      ed25519Sign: sign,
      ed25519PublicKey: publicKey,
    };
    cache.set(provider, h);
  }
  return h;
}

/** Ed25519 signing for the emitter (noble; the private key never leaves this call). */
export function ed25519Sign(message: Uint8Array, privateKey: Uint8Array): Uint8Array {
  return ed.sign(message, privateKey);
}

export function ed25519PublicKey(privateKey: Uint8Array): Uint8Array {
  return ed.getPublicKey(privateKey);
}

/** Lower-case hex SHA-256 of the UTF-8 of `text`: the legacy session form's chain (legacy.ts) only. */
export function sha256Utf8Hex(text: string): string {
  return toHex(nobleSha256(utf8(text)));
}
