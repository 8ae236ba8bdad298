// Exec output travels in the JSON header of one runner frame, where a control
// character costs six bytes (`\u0001`): 1 MiB of them is 6 MiB of JSON, over
// the frame bound. Output is cut to what fits once JSON-escaped, and flagged,
// so a result is never lost to its own size.

/** Bytes `JSON.stringify` spends on the UTF-16 code unit `c` (lone or paired surrogates counted as 6: an upper bound). */
function escapedBytes(c: number): number {
  if (c === 0x22 || c === 0x5c) return 2;
  if (c < 0x20) return c === 0x08 || c === 0x09 || c === 0x0a || c === 0x0c || c === 0x0d ? 2 : 6;
  if (c < 0x80) return 1;
  if (c < 0x800) return 2;
  if (c >= 0xd800 && c <= 0xdfff) return 6;
  return 3;
}

/** The longest prefix of `s` whose JSON string encoding fits `maxBytes`, and whether it was cut. */
export function fitJson(s: string, maxBytes: number): { text: string; cut: boolean } {
  let used = 2; // the quotes
  for (let i = 0; i < s.length; i++) {
    used += escapedBytes(s.charCodeAt(i));
    if (used > maxBytes) {
      // Never split a surrogate pair.
      const end = i > 0 && s.charCodeAt(i - 1) >= 0xd800 && s.charCodeAt(i - 1) <= 0xdbff ? i - 1 : i;
      return { text: s.slice(0, end), cut: true };
    }
  }
  return { text: s, cut: false };
}
