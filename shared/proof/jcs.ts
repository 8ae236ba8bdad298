// RFC 8785 JSON Canonicalization Scheme over JSON data (null, booleans,
// finite numbers, strings, arrays, plain objects).
// - object members sorted by UTF-16 code units (the default Array sort order);
// - numbers in ECMAScript Number::toString form (-0 prints as 0);
// - strings with minimal escaping: JSON.stringify (ES2019 well-formed) does
//   exactly RFC 8785's escaping; a lone surrogate, which I-JSON forbids, is
//   written deterministically as a lower-case \udxxx escape, as the RFC's own
//   JavaScript reference implementation does.
// Anything that is not JSON data (non-finite numbers, BigInt, functions,
// symbols, undefined array elements, class instances, nesting deeper than
// MAX_DEPTH, which also catches cycles) is rejected with JcsError.

export class JcsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'JcsError';
  }
}

/** Deeper nesting is refused; real proofs nest about 6 levels. */
export const MAX_DEPTH = 200;

export function canonicalize(value: unknown): string {
  return serialize(value, 0);
}

/** The canonical form, or undefined when the value is not JSON data. Never throws on a JcsError. */
export function tryCanonicalize(value: unknown): string | undefined {
  try {
    return serialize(value, 0);
  } catch (err) {
    if (err instanceof JcsError || err instanceof RangeError) return undefined;
    throw err;
  }
}

export function serialize(value: unknown, depth: number): string {
  switch (typeof value) {
    case 'string':
      return quoteString(value);
    case 'number':
      if (!Number.isFinite(value)) throw new JcsError(`non-finite number ${String(value)} is not JSON`);
      return value === 0 ? '0' : String(value);
    case 'boolean':
      return value ? 'true' : 'false';
    case 'object':
      if (value === null) return 'null';
      if (depth >= MAX_DEPTH) throw new JcsError(`nesting deeper than ${MAX_DEPTH} (or a cycle)`);
      if (Array.isArray(value)) return serializeArray(value, depth + 1);
      return serializeObject(value as Record<string, unknown>, depth + 1);
    default:
      throw new JcsError(`a ${typeof value} is not JSON data`);
  }
}

/**
 * A JSON string literal, as JSON.stringify writes it. Short printable-ASCII
 * strings without `"` or `\\` (identifiers, timestamps, enum values) are
 * quoted directly: about twice as fast as the JSON.stringify call there.
 * Longer or other strings go to JSON.stringify, which scans faster.
 */
export function quoteString(s: string): string {
  if (s.length > 48) return JSON.stringify(s);
  for (let i = 0; i < s.length; i++) {
    const c = s.charCodeAt(i);
    if (c < 0x20 || c > 0x7e || c === 0x22 || c === 0x5c) return JSON.stringify(s);
  }
  return '"' + s + '"';
}

function serializeArray(arr: unknown[], depth: number): string {
  let out = '[';
  for (let i = 0; i < arr.length; i++) {
    const v = arr[i];
    if (v === undefined) throw new JcsError('undefined array element is not JSON data');
    if (i > 0) out += ',';
    out += serialize(v, depth);
  }
  return out + ']';
}

// Quoted member names repeat across documents ("step", "chain_hash", ...).
const quotedKeys = new Map<string, string>();
const QUOTED_KEYS_MAX = 4096;

function quoteKey(k: string): string {
  let q = quotedKeys.get(k);
  if (q === undefined) {
    q = JSON.stringify(k) + ':';
    if (quotedKeys.size < QUOTED_KEYS_MAX) quotedKeys.set(k, q);
  }
  return q;
}

/** Sorts member names by UTF-16 code units (`<` on strings compares code units). */
function sortKeys(keys: string[]): string[] {
  if (keys.length > 24) return keys.sort();
  for (let i = 1; i < keys.length; i++) {
    const k = keys[i]!;
    let j = i - 1;
    while (j >= 0 && keys[j]! > k) {
      keys[j + 1] = keys[j]!;
      j--;
    }
    keys[j + 1] = k;
  }
  return keys;
}

function serializeObject(obj: Record<string, unknown>, depth: number): string {
  const proto = Object.getPrototypeOf(obj);
  if (proto !== Object.prototype && proto !== null) throw new JcsError('only plain objects are JSON data');
  const keys = sortKeys(Object.keys(obj));
  let out = '{';
  let first = true;
  for (let i = 0; i < keys.length; i++) {
    const k = keys[i]!;
    const v = obj[k];
    if (v === undefined) continue; // absent, as in JSON.stringify
    if (!first) out += ',';
    first = false;
    out += quoteKey(k) + serialize(v, depth);
  }
  return out + '}';
}
