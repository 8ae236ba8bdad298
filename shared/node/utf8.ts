// Text that is not valid UTF-8 is refused, never repaired: decoding invalid
// bytes with replacement (U+FFFD) would make distinct inputs (%FF, %FE) the
// same name or command. These helpers find which field carries the bad text,
// so the refusal can name it. Iterative walks: no recursion on hostile depth.
import { isUtf8 } from 'node:buffer';

/** A string holding an unpaired UTF-16 surrogate (from a JSON "\udcff" escape) has no UTF-8 form. */
const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/;

type Pred = (s: string) => boolean;

/** Path (`command`, `env.A`, `files[0].name`) of the first key or string value matching pred, else null. */
function findString(value: unknown, pred: Pred): string | null {
  const stack: { v: unknown; path: string }[] = [{ v: value, path: '' }];
  while (stack.length > 0) {
    const { v, path } = stack.pop()!;
    if (typeof v === 'string') {
      if (pred(v)) return path;
    } else if (Array.isArray(v)) {
      for (let i = v.length - 1; i >= 0; i--) stack.push({ v: v[i], path: `${path}[${i}]` });
    } else if (typeof v === 'object' && v !== null) {
      const entries = Object.entries(v as Record<string, unknown>);
      for (let i = entries.length - 1; i >= 0; i--) {
        const [k, child] = entries[i]!;
        const p = path ? `${path}.${k}` : k;
        if (pred(k)) return p;
        stack.push({ v: child, path: p });
      }
    }
  }
  return null;
}

/** The field whose string is not well-formed Unicode (unpaired surrogate), or null. */
export function illFormedField(value: unknown): string | null {
  const p = findString(value, (s) => LONE_SURROGATE.test(s));
  return p === null ? null : p || 'body';
}

/**
 * null when raw is valid UTF-8; otherwise the field of the JSON text raw
 * holds whose string carried the invalid bytes (the first string showing a
 * replacement character once decoded), or `fallback` when none can be named.
 */
export function invalidUtf8Field(raw: Uint8Array, fallback = 'body'): string | null {
  if (isUtf8(raw)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength).toString('utf8'));
  } catch {
    return fallback;
  }
  return findString(parsed, (s) => s.includes('\uFFFD')) || fallback;
}

/** Percent-decodes a query component to bytes ('+' is a space), or null when an escape is malformed. */
export function percentDecodeBytes(s: string): Buffer | null {
  const out: number[] = [];
  const src = Buffer.from(s.replace(/\+/g, ' '), 'utf8');
  for (let i = 0; i < src.length; i++) {
    const b = src[i]!;
    if (b !== 0x25) {
      out.push(b);
      continue;
    }
    const hex = src.subarray(i + 1, i + 3).toString('latin1');
    if (!/^[0-9A-Fa-f]{2}$/.test(hex)) return null;
    out.push(parseInt(hex, 16));
    i += 2;
  }
  return Buffer.from(out);
}
