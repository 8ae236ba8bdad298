// Byte encodings used by proofs: UTF-8, lower-case hex, standard base64 with
// padding. No Node Buffer: this module runs in browsers too.

const encoder = new TextEncoder();

/** UTF-8 bytes of a string (lone surrogates become U+FFFD, as TextEncoder does). */
export function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

const HEX = Array.from({ length: 256 }, (_, i) => i.toString(16).padStart(2, '0'));

export function toHex(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += HEX[bytes[i]!]!;
  return out;
}

/** A binary string: one char (0..255) per byte. */
export function toBinary(bytes: Uint8Array): string {
  let out = '';
  for (let i = 0; i < bytes.length; i++) out += String.fromCharCode(bytes[i]!);
  return out;
}

/** Lower-case hex of a binary string (one char per byte). */
export function binaryToHex(bin: string): string {
  let out = '';
  for (let i = 0; i < bin.length; i++) out += HEX[bin.charCodeAt(i) & 0xff]!;
  return out;
}

/** Writes a binary string's bytes into out at offset. */
export function binaryInto(bin: string, out: Uint8Array, offset: number): void {
  for (let i = 0; i < bin.length; i++) out[offset + i] = bin.charCodeAt(i);
}

/** Decodes lower- or upper-case hex; undefined when not an even-length hex string. */
export function fromHex(hex: string): Uint8Array | undefined {
  if (hex.length % 2 !== 0 || !/^[0-9a-fA-F]*$/.test(hex)) return undefined;
  const out = new Uint8Array(hex.length / 2);
  for (let i = 0; i < out.length; i++) out[i] = parseInt(hex.slice(2 * i, 2 * i + 2), 16);
  return out;
}

const B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
const B64_INDEX = new Int16Array(128).fill(-1);
for (let i = 0; i < B64.length; i++) B64_INDEX[B64.charCodeAt(i)] = i;

export function toBase64(bytes: Uint8Array): string {
  let out = '';
  let i = 0;
  for (; i + 2 < bytes.length; i += 3) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8) | bytes[i + 2]!;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + B64[n & 63]!;
  }
  const rest = bytes.length - i;
  if (rest === 1) {
    const n = bytes[i]! << 16;
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + '==';
  } else if (rest === 2) {
    const n = (bytes[i]! << 16) | (bytes[i + 1]! << 8);
    out += B64[n >> 18]! + B64[(n >> 12) & 63]! + B64[(n >> 6) & 63]! + '=';
  }
  return out;
}

/**
 * Strict standard base64 (RFC 4648 section 4) with padding: length a multiple
 * of 4, only the alphabet, padding only at the end, unused bits zero (so each
 * byte string has exactly one accepted encoding). undefined when malformed.
 */
export function fromBase64(text: string): Uint8Array | undefined {
  const len = text.length;
  if (len % 4 !== 0) return undefined;
  let pad = 0;
  if (len > 0 && text.charCodeAt(len - 1) === 61 /* = */) pad = text.charCodeAt(len - 2) === 61 ? 2 : 1;
  const out = new Uint8Array((len / 4) * 3 - pad);
  // Full quads: four table look-ups, no per-quad allocation (hot in verification).
  const full = pad === 0 ? len : len - 4;
  let o = 0;
  for (let i = 0; i < full; i += 4) {
    const a = b64Digit(text, i),
      b = b64Digit(text, i + 1),
      c = b64Digit(text, i + 2),
      d = b64Digit(text, i + 3);
    if ((a | b | c | d) < 0) return undefined;
    const n = (a << 18) | (b << 12) | (c << 6) | d;
    out[o++] = n >> 16;
    out[o++] = (n >> 8) & 0xff;
    out[o++] = n & 0xff;
  }
  if (pad > 0) {
    // Last quad: `xx==` (one byte) or `xxx=` (two bytes); the unused bits must be zero.
    const a = b64Digit(text, full),
      b = b64Digit(text, full + 1);
    const c = pad === 2 ? 0 : b64Digit(text, full + 2);
    if ((a | b | c) < 0) return undefined;
    const n = (a << 18) | (b << 12) | (c << 6);
    if ((n & (pad === 2 ? 0xffff : 0xff)) !== 0) return undefined;
    out[o++] = n >> 16;
    if (pad === 1) out[o] = (n >> 8) & 0xff;
  }
  return out;
}

/** Value of the base64 digit at i, -1 when not in the alphabet (`=` included). */
function b64Digit(text: string, i: number): number {
  const c = text.charCodeAt(i);
  return c < 128 ? B64_INDEX[c]! : -1;
}

/** Constant-time-ish equality of two byte strings (length leaks). */
export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  let d = 0;
  for (let i = 0; i < a.length; i++) d |= a[i]! ^ b[i]!;
  return d === 0;
}
