// Frame codec of the runner protocol. A frame is
//   u32 BE header length | u32 BE body length | header (UTF-8 JSON object) | body (raw bytes)
// Sizes are bounded on both sides; a decoder that meets an oversized or
// garbled frame reports it instead of throwing, so a bad peer never crashes us.
import type { Writable } from 'node:stream';
import { illFormedField, invalidUtf8Field } from './utf8.js';

export const FRAME_PREFIX_BYTES = 8;

export interface FrameLimits {
  maxHeaderBytes: number;
  maxBodyBytes: number;
}

export const DEFAULT_FRAME_LIMITS: FrameLimits = {
  maxHeaderBytes: 4 * 1024 * 1024,
  maxBodyBytes: 128 * 1024 * 1024,
};

export interface Frame {
  header: Record<string, unknown>;
  body: Buffer;
  /**
   * Set when the header text was not valid UTF-8 (or held an unpaired surrogate escape): the
   * field that carried it (e.g. `params.filename`). The header is then decoded with U+FFFD
   * replacement only so the peer can be answered by id; the request must be refused.
   */
  badTextField?: string;
}

export class FrameError extends Error {
  /** fatal: the byte stream cannot be resynchronized; the connection must close. */
  readonly fatal: boolean;
  /** too_large: a well-formed frame whose body exceeded the bound (skipped, header kept). */
  readonly kind: 'garbled' | 'too_large';
  /** The header of a skipped oversized frame, so the peer can be answered by id. */
  readonly header: Record<string, unknown> | null;
  constructor(
    message: string,
    fatal: boolean,
    kind: 'garbled' | 'too_large' = 'garbled',
    header: Record<string, unknown> | null = null,
  ) {
    super(message);
    this.name = 'FrameError';
    this.fatal = fatal;
    this.kind = kind;
    this.header = header;
  }
}

/**
 * Encodes one frame as its head (length prefix and header) and its body, to be written one after
 * the other: a large body (an exec's output, an upload) is never copied into a frame of its own.
 * Throws FrameError when it would exceed the limits.
 */
export function encodeFrameParts(
  header: Record<string, unknown>,
  body: Uint8Array | null,
  limits: FrameLimits = DEFAULT_FRAME_LIMITS,
): Uint8Array[] {
  const h = Buffer.from(JSON.stringify(header), 'utf8');
  const bodyLen = body ? body.byteLength : 0;
  if (h.length > limits.maxHeaderBytes)
    throw new FrameError(`frame header of ${h.length} bytes exceeds ${limits.maxHeaderBytes}`, false);
  if (bodyLen > limits.maxBodyBytes)
    throw new FrameError(`frame body of ${bodyLen} bytes exceeds ${limits.maxBodyBytes}`, false);
  const head = Buffer.allocUnsafe(FRAME_PREFIX_BYTES + h.length);
  head.writeUInt32BE(h.length, 0);
  head.writeUInt32BE(bodyLen, 4);
  h.copy(head, FRAME_PREFIX_BYTES);
  return body && bodyLen > 0 ? [head, body] : [head];
}

/** Encodes one frame into one buffer; throws FrameError when it would exceed the limits. */
export function encodeFrame(
  header: Record<string, unknown>,
  body: Uint8Array | null,
  limits: FrameLimits = DEFAULT_FRAME_LIMITS,
): Buffer {
  return Buffer.concat(encodeFrameParts(header, body, limits));
}

/** Writes a frame's parts together (one writev when the socket can take them at once). */
export function writeFrame(sock: Writable, parts: Uint8Array[]): void {
  if (parts.length === 1) {
    sock.write(parts[0]);
    return;
  }
  sock.cork();
  for (const p of parts) sock.write(p);
  sock.uncork();
}

export type DecodeEvent = { kind: 'frame'; frame: Frame } | { kind: 'error'; error: FrameError };

/**
 * Incremental decoder: push() chunks as they arrive, get complete frames or
 * errors back. After a fatal error it refuses further input.
 */
/** Bodies from this size up own their buffer (takeBody). */
const OWN_BODY_BYTES = 64 * 1024;

export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private dead = false;
  /** Bytes of an oversized body still to discard. */
  private skip = 0;
  constructor(private readonly limits: FrameLimits = DEFAULT_FRAME_LIMITS) {}

  push(chunk: Buffer): DecodeEvent[] {
    if (this.dead) return [];
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: DecodeEvent[] = [];
    for (;;) {
      if (this.skip > 0) {
        const n = Math.min(this.skip, this.buffered);
        this.drop(n);
        this.skip -= n;
        if (this.skip > 0) break;
      }
      if (this.buffered < FRAME_PREFIX_BYTES) break;
      const prefix = this.peek(FRAME_PREFIX_BYTES);
      const hLen = prefix.readUInt32BE(0);
      const bLen = prefix.readUInt32BE(4);
      if (hLen > 0 && hLen <= this.limits.maxHeaderBytes && bLen > this.limits.maxBodyBytes) {
        // Well-formed but too big: keep the header (to answer by id), discard the body as it streams by.
        if (this.buffered < FRAME_PREFIX_BYTES + hLen) break;
        const head = this.take(FRAME_PREFIX_BYTES + hLen).subarray(FRAME_PREFIX_BYTES);
        let header: Record<string, unknown> | null = null;
        try {
          const parsed: unknown = JSON.parse(head.toString('utf8'));
          if (typeof parsed === 'object' && parsed !== null && !Array.isArray(parsed))
            header = parsed as Record<string, unknown>;
        } catch {
          header = null;
        }
        this.skip = bLen;
        out.push({
          kind: 'error',
          error: new FrameError(
            `frame body of ${bLen} bytes exceeds ${this.limits.maxBodyBytes}`,
            false,
            'too_large',
            header,
          ),
        });
        continue;
      }
      if (hLen === 0 || hLen > this.limits.maxHeaderBytes) {
        this.dead = true;
        this.chunks = [];
        this.buffered = 0;
        out.push({
          kind: 'error',
          error: new FrameError(`frame of header ${hLen} / body ${bLen} bytes is out of bounds`, true),
        });
        break;
      }
      const total = FRAME_PREFIX_BYTES + hLen + bLen;
      if (this.buffered < total) break;
      const head = this.take(FRAME_PREFIX_BYTES + hLen);
      const hBytes = head.subarray(FRAME_PREFIX_BYTES);
      const body = this.takeBody(bLen);
      let header: unknown;
      try {
        header = JSON.parse(hBytes.toString('utf8'));
      } catch {
        out.push({ kind: 'error', error: new FrameError('frame header is not JSON', false) });
        continue;
      }
      if (typeof header !== 'object' || header === null || Array.isArray(header)) {
        out.push({ kind: 'error', error: new FrameError('frame header is not a JSON object', false) });
        continue;
      }
      const bad = invalidUtf8Field(hBytes, 'header') ?? illFormedField(header);
      out.push({
        kind: 'frame',
        frame: { header: header as Record<string, unknown>, body, ...(bad !== null ? { badTextField: bad } : {}) },
      });
    }
    return out;
  }

  /** The first n buffered bytes, copying only those (never everything buffered) when they span chunks. */
  private peek(n: number): Buffer {
    const first = this.chunks[0];
    if (!first || first.length >= n) return first ? first.subarray(0, n) : Buffer.alloc(0);
    return this.copyOut(Buffer.allocUnsafe(n));
  }

  /**
   * A large body gets a buffer of its own (copied straight from the chunks, no larger copy first), so
   * that its receiver may move it to another thread without taking the bytes of the next frame along.
   */
  private takeBody(n: number): Buffer {
    if (n < OWN_BODY_BYTES) return this.take(n);
    const body = this.copyOut(Buffer.allocUnsafeSlow(n));
    this.drop(n);
    return body;
  }

  private take(n: number): Buffer {
    const out = this.peek(n);
    this.drop(n);
    return out;
  }

  /** Fills out from the first buffered bytes. */
  private copyOut(out: Buffer): Buffer {
    let at = 0;
    for (const c of this.chunks) {
      if (at >= out.length) break;
      at += c.copy(out, at, 0, Math.min(c.length, out.length - at));
    }
    return out;
  }

  /** Forgets the first n buffered bytes. */
  private drop(n: number): void {
    let left = n;
    while (left > 0) {
      const c = this.chunks[0]!;
      if (c.length <= left) {
        this.chunks.shift();
        left -= c.length;
      } else {
        this.chunks[0] = c.subarray(left);
        left = 0;
      }
    }
    this.buffered -= n;
  }
}
