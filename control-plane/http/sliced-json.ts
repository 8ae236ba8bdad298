// A JSON answer that carries long strings (an exec's output: up to 1 MiB per
// stream, 6 MiB once a control character becomes `\u0001`) is written in
// slices, with the event loop free between them. In one piece its
// serialization held the loop every tenant shares for 70-100 ms per answer,
// so one account printing control characters in a loop stalled every other
// account's requests for seconds. Small answers stay plain objects.
import { Readable } from 'node:stream';

/** Strings longer than this are written in slices of this many UTF-16 code units. */
export const SLICE_CHARS = 64 * 1024;

/** Whether an answer with strings of these lengths is worth slicing. */
export function wantsSlicing(...stringLengths: number[]): boolean {
  return stringLengths.reduce((a, b) => a + b, 0) > 4 * SLICE_CHARS;
}

const isHigh = (c: number): boolean => c >= 0xd800 && c <= 0xdbff;
const isLow = (c: number): boolean => c >= 0xdc00 && c <= 0xdfff;

// Slices of all long answers take turns, one slice per turn of the event loop however many
// answers are being written: one account's many concurrent floods add one slice, not one each,
// between two of another account's requests.
const turns: (() => void)[] = [];
let turning = false;
function nextTurn(): Promise<void> {
  return new Promise((resolve) => {
    turns.push(resolve);
    if (!turning) {
      turning = true;
      setImmediate(giveTurn);
    }
  });
}
function giveTurn(): void {
  turns.shift()?.();
  if (turns.length > 0) setImmediate(giveTurn);
  else turning = false;
}

/** A control character JSON.stringify writes as six bytes (`\u00XX`); the others have short escapes. */
// eslint-disable-next-line no-control-regex -- control characters are exactly what is looked for
const LONG_ESCAPE = /[\x00-\x07\x0b\x0e-\x1f]/;
/** Per ASCII code: 0 copied as is, 1 written as \u00XX, else the letter of its short escape (\n, \", ...). */
const ASCII = new Uint8Array(128);
for (let c = 0; c < 0x20; c++) ASCII[c] = 1;
for (const [c, e] of [
  [8, 'b'],
  [9, 't'],
  [10, 'n'],
  [12, 'f'],
  [13, 'r'],
  [34, '"'],
  [92, '\\'],
] as const)
  ASCII[c] = e.charCodeAt(0);
const HEX = Uint8Array.from('0123456789abcdef', (c) => c.charCodeAt(0));

/**
 * The UTF-8 of JSON.stringify(s) without its quotes. Text with control characters that take six
 * bytes each (a capsule printing 1 MiB of `\x01`) is escaped and encoded here in one pass, instead
 * of JSON.stringify and then the socket's encoding of a string six times longer (measured: 7-12
 * against 13-16 ms per MiB); other text is faster through JSON.stringify (2.4 against 4 ms per MiB
 * of lines), and takes it.
 */
export function jsonStringBytes(s: string): Buffer {
  // Either way gives the same bytes: a look at the start picks the faster one for a flood.
  if (!LONG_ESCAPE.test(s.slice(0, 256))) return Buffer.from(JSON.stringify(s).slice(1, -1), 'utf8');
  const out = Buffer.allocUnsafe(s.length * 6);
  let o = 0;
  for (let i = 0; i < s.length; i++) {
    let c = s.charCodeAt(i);
    if (c < 0x80) {
      const e = ASCII[c]!;
      if (e === 0) {
        out[o++] = c;
        continue;
      }
      if (e !== 1) {
        out[o++] = 0x5c;
        out[o++] = e;
        continue;
      }
    } else if (c < 0x800) {
      out[o++] = 0xc0 | (c >> 6);
      out[o++] = 0x80 | (c & 63);
      continue;
    } else if (c < 0xd800 || c > 0xdfff) {
      out[o++] = 0xe0 | (c >> 12);
      out[o++] = 0x80 | ((c >> 6) & 63);
      out[o++] = 0x80 | (c & 63);
      continue;
    } else if (isHigh(c) && isLow(s.charCodeAt(i + 1))) {
      c = ((c - 0xd800) << 10) + (s.charCodeAt(++i) - 0xdc00) + 0x10000;
      out[o++] = 0xf0 | (c >> 18);
      out[o++] = 0x80 | ((c >> 12) & 63);
      out[o++] = 0x80 | ((c >> 6) & 63);
      out[o++] = 0x80 | (c & 63);
      continue;
    }
    // \u00XX for a control character, \udXXX for a lone surrogate, as JSON.stringify writes them.
    out[o++] = 0x5c;
    out[o++] = 0x75;
    out[o++] = HEX[c >> 12]!;
    out[o++] = HEX[(c >> 8) & 15]!;
    out[o++] = HEX[(c >> 4) & 15]!;
    out[o++] = HEX[c & 15]!;
  }
  return out.subarray(0, o);
}

/** The JSON text of a flat object, the same as JSON.stringify(value), as a UTF-8 stream that yields between slices. */
export function slicedJson(value: Record<string, unknown>, sliceChars = SLICE_CHARS): Readable {
  async function* pieces(): AsyncGenerator<string | Buffer> {
    let first = true;
    for (const [k, v] of Object.entries(value)) {
      if (v === undefined || typeof v === 'function' || typeof v === 'symbol') continue;
      const sep = first ? '{' : ',';
      first = false;
      if (typeof v !== 'string' || v.length <= sliceChars) {
        yield `${sep}${JSON.stringify(k)}:${JSON.stringify(v)}`;
        continue;
      }
      yield `${sep}${JSON.stringify(k)}:"`;
      for (let i = 0; i < v.length;) {
        let end = Math.min(v.length, i + sliceChars);
        // WARNING: never cut a surrogate pair: each half alone would be written as a `\ud8xx` escape.
        if (isHigh(v.charCodeAt(end - 1)) && isLow(v.charCodeAt(end))) end += end - 1 > i ? -1 : 1;
        yield jsonStringBytes(v.slice(i, end));
        i = end;
        await nextTurn();
      }
      yield '"';
    }
    yield first ? '{}' : '}';
  }
  return Readable.from(pieces(), { objectMode: false });
}

/** Answers `value` as JSON: sliced when its long strings (lengths given) are worth it, else as a plain body. */
export function answerJson(
  ctx: { type: string; body: unknown },
  value: Record<string, unknown>,
  ...stringLengths: number[]
): void {
  if (!wantsSlicing(...stringLengths)) {
    ctx.body = value;
    return;
  }
  ctx.type = 'application/json';
  ctx.body = slicedJson(value);
}
