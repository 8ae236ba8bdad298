// Bounded request body readers. Over the bound -> 413 before the rest is read;
// a body that stalls -> 400 and the connection is closed; bad JSON or JSON
// nested deeper than MAX_JSON_DEPTH -> 400 naming the body. Bytes are never logged.
import type { Context } from 'koa';
import { ApiError, invalid } from '../../shared/errors.js';
import { parseJsonObject } from '../domain/index.js';
import { illFormedField, invalidUtf8Field } from '../../shared/node/utf8.js';

/**
 * Deepest array/object nesting a JSON body may have. Far above any request
 * of the API (an AuditRecord nests about 6 deep) and far below what would
 * overflow the stack of a recursive walk (JSON.stringify, schema checks).
 */
export const MAX_JSON_DEPTH = 64;

export interface ReadOptions {
  limit: number;
  /** A body that sends nothing for this long is refused. */
  idleTimeoutMs: number;
  /** Shared bound on bytes held by concurrent readers of one route (see ByteBudget). */
  budget?: ByteBudget;
}

/**
 * Bytes that concurrent requests of one route may hold at once. A request
 * takes its declared Content-Length before reading (chunked: its bytes as
 * they arrive) and gives it back when its response closes; none left -> 503
 * with Retry-After.
 */
export class ByteBudget {
  private used = 0;
  constructor(readonly total: number) {}
  take(n: number): boolean {
    if (this.used + n > this.total) return false;
    this.used += n;
    return true;
  }
  give(n: number): void {
    this.used = Math.max(0, this.used - n);
  }
}

const busy = (): ApiError =>
  new ApiError('service_unavailable', 'too many large request bodies in flight; retry shortly', {
    extra: { retry_after: 1 },
  });

/** Reads the whole body within the bounds of `o`; budget taken is given back when the response closes. */
async function readBounded(ctx: Context, o: ReadOptions): Promise<Buffer> {
  const tooLarge = (): ApiError =>
    new ApiError('payload_too_large', `body: exceeds ${o.limit} bytes`, { extra: { field: 'body' } });
  const declared = Number(ctx.get('content-length') || NaN);
  if (Number.isFinite(declared) && declared > o.limit) throw tooLarge();
  const budget = o.budget;
  let held = 0;
  if (budget) {
    // The parsed value lives as long as the request: keep the bytes counted until the response is done.
    ctx.res.once('close', () => budget.give(held));
    if (Number.isFinite(declared)) {
      if (!budget.take(declared)) throw busy();
      held = declared;
    }
  }
  const req = ctx.req;
  return new Promise<Buffer>((resolve, reject) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let idle: NodeJS.Timeout | undefined;
    const done = (err: Error | null): void => {
      clearTimeout(idle);
      req.off('data', onData).off('end', onEnd).off('error', onError).off('close', onClose);
      if (err) {
        req.resume(); // drain without keeping it
        reject(err);
      } else resolve(Buffer.concat(chunks, size));
    };
    const arm = (): void => {
      clearTimeout(idle);
      idle = setTimeout(() => {
        // Nothing more is read from this connection: answer and close it.
        ctx.set('Connection', 'close');
        done(
          new ApiError('invalid_parameters', `body: no data received for ${o.idleTimeoutMs} ms`, {
            extra: { field: 'body' },
          }),
        );
      }, o.idleTimeoutMs);
    };
    const onData = (chunk: Buffer): void => {
      arm();
      size += chunk.length;
      if (size > o.limit) return done(tooLarge());
      if (budget && size > held) {
        if (!budget.take(size - held)) return done(busy());
        held = size;
      }
      chunks.push(chunk);
    };
    const onEnd = (): void => done(null);
    const onError = (e: Error): void => done(e);
    const onClose = (): void => done(new Error('request closed before its end'));
    // Closed already (its client went away while the request waited for its turn): 'close' will not come again.
    if (req.destroyed) return onClose();
    req.on('data', onData).on('end', onEnd).on('error', onError).on('close', onClose);
    arm();
  });
}

/**
 * Whether JSON text nests arrays/objects deeper than `max`, by one pass over
 * the raw bytes (no recursion, no parse). Bytes inside strings are skipped;
 * UTF-8 continuation bytes never equal an ASCII bracket or quote.
 */
export function nestsDeeperThan(raw: Uint8Array, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < raw.length; i++) {
    const b = raw[i]!;
    if (inString) {
      if (b === 0x5c)
        i++; // backslash: skip the escaped byte
      else if (b === 0x22) inString = false;
    } else if (b === 0x22) inString = true;
    else if (b === 0x5b || b === 0x7b) {
      if (++depth > max) return true;
    } else if (b === 0x5d || b === 0x7d) depth--;
  }
  return false;
}

/**
 * Reads a JSON body's bytes, checked for type and nesting but not parsed
 * (for a caller that parses elsewhere). An empty body reads as `{}`.
 */
export async function readJsonBytes(ctx: Context, o: ReadOptions): Promise<Buffer> {
  const raw = await readBounded(ctx, o);
  if (raw.length === 0) return Buffer.from('{}');
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]+\+)?json\b/i.test(type))
    throw invalid('Content-Type', 'must be application/json');
  // Before anything walks the value: a deep body would overflow every recursive reader after JSON.parse.
  if (nestsDeeperThan(raw, MAX_JSON_DEPTH)) throw invalid('body', `nested deeper than ${MAX_JSON_DEPTH} levels`);
  // Refused, never repaired with U+FFFD (two different byte strings would read as one command).
  const bad = invalidUtf8Field(raw);
  if (bad !== null) throw invalid(bad, 'must be valid UTF-8');
  return raw;
}

/** Reads a JSON object body. An empty body reads as `{}`. */
export async function readJson(ctx: Context, o: ReadOptions): Promise<Record<string, unknown>> {
  const body = parseJsonObject((await readJsonBytes(ctx, o)).toString('utf8'));
  // A "\udcff" escape parses to a string with no UTF-8 form: refused like invalid bytes.
  const bad = illFormedField(body);
  if (bad !== null) throw invalid(bad, 'must be valid Unicode text (an unpaired surrogate escape has no UTF-8 form)');
  return body;
}

export async function readRaw(ctx: Context, o: ReadOptions): Promise<Buffer> {
  return readBounded(ctx, o);
}
