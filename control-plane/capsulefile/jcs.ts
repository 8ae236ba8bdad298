// Minimal RFC 8785 (JCS) canonicalizer for the Capsulefile content hash.
// TEMPORARY: the project's JCS lands in shared/proof/jcs.ts; when it does,
// content-hash.ts should import that one and this file should be deleted
// (the golden hashes in test/capsulefile must stay equal: both are RFC 8785).
//
// Covers the JSON data model only: null, booleans, finite numbers, strings,
// arrays and plain objects. Anything else (undefined, NaN, Infinity, bigint,
// lone surrogates) is a programming error and throws.

export function canonicalize(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('JCS: non-finite number');
      // ES2015 Number serialization is exactly what RFC 8785 section 3.2.2.3 requires (-0 gives "0").
      return JSON.stringify(value);
    case 'string':
      if (/\p{Cs}/u.test(value)) throw new TypeError('JCS: string with a lone surrogate');
      // JSON.stringify escapes exactly as RFC 8785 section 3.2.2.2 requires.
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map(canonicalize).join(',')}]`;
      const proto = Object.getPrototypeOf(value) as unknown;
      if (proto !== Object.prototype && proto !== null) throw new TypeError('JCS: not a plain object');
      const obj = value as Record<string, unknown>;
      // Default sort compares UTF-16 code units, which is RFC 8785's key order.
      const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
      return `{${keys.map((k) => `${canonicalize(k)}:${canonicalize(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`JCS: cannot canonicalize a ${typeof value}`);
  }
}
