// Bounded request body readers. Over the bound -> 413 before the rest is read;
// bad JSON -> 400 naming the body. Bytes are never logged.
import type { Context } from 'koa';
import { ApiError, invalid } from '../../shared/errors.js';

async function readBounded(ctx: Context, limit: number, what: string): Promise<Buffer> {
  const declared = Number(ctx.get('content-length') || NaN);
  if (Number.isFinite(declared) && declared > limit) {
    throw new ApiError('payload_too_large', `${what}: exceeds ${limit} bytes`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of ctx.req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > limit) {
      ctx.req.resume(); // drain without keeping it
      throw new ApiError('payload_too_large', `${what}: exceeds ${limit} bytes`);
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks, size);
}

/** Reads a JSON object body. An empty body reads as `{}`. */
export async function readJson(ctx: Context, limit: number): Promise<unknown> {
  const raw = await readBounded(ctx, limit, 'body');
  if (raw.length === 0) return {};
  const type = ctx.get('content-type');
  if (type && !/^application\/([\w.+-]+\+)?json\b/i.test(type))
    throw invalid('Content-Type', 'must be application/json');
  let value: unknown;
  try {
    value = JSON.parse(raw.toString('utf8'));
  } catch {
    throw invalid('body', 'malformed JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw invalid('body', 'must be a JSON object');
  return value;
}

export async function readRaw(ctx: Context, limit: number): Promise<Buffer> {
  return readBounded(ctx, limit, 'body');
}
