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

const yieldToLoop = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/** The JSON text of a flat object, the same as JSON.stringify(value), as a stream that yields between slices. */
export function slicedJson(value: Record<string, unknown>, sliceChars = SLICE_CHARS): Readable {
  async function* pieces(): AsyncGenerator<string> {
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
        yield JSON.stringify(v.slice(i, end)).slice(1, -1);
        i = end;
        await yieldToLoop();
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
