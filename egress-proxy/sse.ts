// Splits a response byte stream into the chunks recorded as
// StreamingEgressChunk. Boundaries are a function of the bytes alone, so a
// holder of the body can recompute every chunk hash:
// - text/event-stream: whole SSE events (each ending after its blank line;
//   LF, CRLF or CR line ends, per the HTML SSE grammar), a chunk closing at
//   the first event end where it holds at least `minChunkBytes` (so tiny
//   events cost one hash per chunk, not one per event);
// - any other streamed body: fixed blocks of `blockBytes`.
// Either way a chunk longer than `maxChunkBytes` is cut there (no unbounded buffering;
// only the running hash is kept, never the bytes).
import { createHash, type Hash } from 'node:crypto';

export interface ChunkDone {
  index: number;
  bytes: number;
  /** Raw 64-byte SHA-512 of the chunk. */
  digest: Buffer;
}

const LF = 0x0a,
  CR = 0x0d;

export class StreamChunker {
  #hash: Hash = createHash('sha512');
  #bytes = 0;
  #index = 0;
  // SSE line state: at the start of a line, and whether the previous byte was CR.
  #lineEmpty = true;
  #prevCR = false;
  #pendingEndAfterCR = false;
  readonly #sse: boolean;
  readonly #maxChunk: number;
  readonly #minChunk: number;

  constructor(
    opts: { sse: boolean; maxChunkBytes: number; minChunkBytes?: number },
    private readonly onChunk: (c: ChunkDone) => void,
  ) {
    this.#sse = opts.sse;
    this.#maxChunk = opts.maxChunkBytes;
    this.#minChunk = opts.minChunkBytes ?? 0;
  }

  write(buf: Buffer): void {
    if (!this.#sse) return this.#writeBlocks(buf);
    // Bytes from `start` are hashed only when a chunk closes or the buffer ends (one update per chunk, not per event).
    let start = 0;
    for (let i = 0; i < buf.length; i++) {
      const b = buf[i] as number;
      if (this.#pendingEndAfterCR) {
        // An empty line ended with CR: its LF (if any) belongs to this event.
        this.#pendingEndAfterCR = false;
        this.#prevCR = false;
        if (b === LF) {
          start = this.#eventEnd(buf, start, i + 1);
          continue;
        }
        start = this.#eventEnd(buf, start, i);
      }
      if (b === LF && this.#prevCR) {
        this.#prevCR = false;
        this.#lineEmpty = true;
      } else if (b === CR || b === LF) {
        if (this.#lineEmpty) {
          if (b === CR) {
            this.#pendingEndAfterCR = true;
            this.#prevCR = true;
            continue;
          }
          this.#prevCR = false;
          start = this.#eventEnd(buf, start, i + 1);
          continue;
        }
        this.#lineEmpty = true;
        this.#prevCR = b === CR;
      } else {
        this.#lineEmpty = false;
        this.#prevCR = false;
      }
      if (this.#bytes + (i - start) + 1 >= this.#maxChunk) {
        this.#take(buf, start, i + 1);
        start = i + 1;
        this.#emit();
      }
    }
    this.#take(buf, start, buf.length);
  }

  /** An event ended just before `end`: the chunk closes there once it holds minChunkBytes. Returns the new start. */
  #eventEnd(buf: Buffer, start: number, end: number): number {
    if (this.#bytes + (end - start) < this.#minChunk) return start;
    this.#take(buf, start, end);
    this.#emit();
    return end;
  }

  #writeBlocks(buf: Buffer): void {
    let start = 0;
    while (start < buf.length) {
      const n = Math.min(buf.length - start, this.#maxChunk - this.#bytes);
      this.#take(buf, start, start + n);
      start += n;
      if (this.#bytes >= this.#maxChunk) this.#emit();
    }
  }

  /** Emits the trailing partial chunk, if any. */
  end(): void {
    if (this.#bytes > 0) this.#emit();
  }

  #take(buf: Buffer, from: number, to: number): void {
    if (to > from) {
      this.#hash.update(buf.subarray(from, to));
      this.#bytes += to - from;
    }
  }

  #emit(): void {
    if (this.#bytes === 0) return;
    this.onChunk({ index: this.#index++, bytes: this.#bytes, digest: this.#hash.digest() });
    this.#hash = createHash('sha512');
    this.#bytes = 0;
    // Line state is kept: a size cut can fall mid-line.
  }
}
