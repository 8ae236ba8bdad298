// The `limit` and `cursor` query parameters of every list endpoint (SPEC:
// limit 1-100, default 20; a cursor is one this endpoint issued).
import { invalid } from '../../shared/errors.js';
import type { Ctx } from './context.js';
import { queryParam } from './query.js';

/** Parses limit and cursor; `cursorRe` is the shape of the endpoint's own cursors (`created_at|id`). */
export function paging(ctx: Ctx, cursorRe: RegExp): { limit: number; cursor: string | null } {
  const rawLimit = queryParam(ctx, 'limit');
  const limit = rawLimit === undefined ? 20 : Number(rawLimit);
  if (!Number.isInteger(limit) || limit < 1 || limit > 100) throw invalid('limit', 'must be an integer from 1 to 100');
  const rawCursor = queryParam(ctx, 'cursor');
  const cursor = rawCursor !== undefined && rawCursor !== '' ? rawCursor : null;
  if (cursor !== null && !cursorRe.test(cursor)) throw invalid('cursor', 'not a cursor this endpoint issued');
  return { limit, cursor };
}
