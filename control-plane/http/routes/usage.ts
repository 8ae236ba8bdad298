// Usage: summary, estimate, items as JSON pages and as one RFC 4180 CSV
// stream. The CSV is produced batch by batch (short keyset queries, one
// formatted chunk per batch, stream backpressure), so memory stays flat
// however many items there are.
import { Readable } from 'node:stream';
import Router from '@koa/router';
import Papa from 'papaparse';
import { invalid } from '../../../shared/errors.js';
import type { UsageItem } from '../../domain/index.js';
import { isoMicros, itemRow, itemView, ITEM_FIELDS } from '../../service/index.js';
import { caller, type AppDeps, type Ctx } from '../context.js';
import { auth } from '../middleware.js';
import { paging } from '../paging.js';

/**
 * Rows per written chunk (about 60 KB): small strings die young in V8's
 * scavenger; chunks of a whole batch (600 KB) land in large-object space,
 * which only a full GC frees, and the process grew by 100 MB over an export.
 */
const CSV_CHUNK_ROWS = 500;
const USAGE_CURSOR_RE = /^[0-9TZ:.-]{20,40}\|usg_[0-9a-f]{1,64}$/;
const INSTANT_RE = /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?(Z|[+-]\d{2}:\d{2}))?$/;

/** The `from` (inclusive) and `to` (exclusive) filters, as contract timestamps. */
function range(ctx: Ctx): { from: string | null; to: string | null } {
  const one = (name: 'from' | 'to'): string | null => {
    const v = ctx.query[name];
    if (v === undefined || v === '') return null;
    const ms = typeof v === 'string' && INSTANT_RE.test(v) ? Date.parse(v) : NaN;
    if (!Number.isFinite(ms)) throw invalid(name, 'must be an ISO 8601 timestamp such as 2026-01-01T00:00:00Z');
    return isoMicros(ms);
  };
  const from = one('from');
  const to = one('to');
  if (from !== null && to !== null && to < from) throw invalid('to', 'must not be before from');
  return { from, to };
}

export function usageRoutes(d: AppDeps): Router {
  const r = new Router<Ctx['state']>();
  const s = d.services;
  const a = auth(d);

  r.get('/v1/usage/summary', a, async (ctx: Ctx) => {
    ctx.body = await s.usage.summary(caller(ctx));
  });

  r.get('/v1/usage/estimate', a, async (ctx: Ctx) => {
    ctx.body = await s.usage.estimate(caller(ctx));
  });

  r.get('/v1/usage/items', a, async (ctx: Ctx) => {
    const { limit, cursor } = paging(ctx, USAGE_CURSOR_RE);
    const page = await s.usage.items(caller(ctx), { ...range(ctx), limit, cursor });
    ctx.body = { items: page.items.map(itemView), next_cursor: page.next_cursor };
  });

  r.get('/v1/usage/items.csv', a, async (ctx: Ctx) => {
    const { from, to } = range(ctx);
    // RFC 4180: a header row, CRLF after every record, quotes only where a value needs them.
    // papaparse ends the last record without a line break, except a header with no rows: one CRLF each time.
    const csv = (rows: unknown[][], header: boolean): string =>
      `${Papa.unparse({ fields: [...ITEM_FIELDS], data: rows }, { header, newline: '\r\n' }).replace(/\r\n$/, '')}\r\n`;
    let header = true;
    const format = (items: UsageItem[]): string[] => {
      const texts: string[] = [];
      for (let i = 0; i < items.length; i += CSV_CHUNK_ROWS) {
        texts.push(csv(items.slice(i, i + CSV_CHUNK_ROWS).map(itemRow), header));
        header = false;
      }
      if (header) texts.push(csv([], true)); // no items at all: the header row alone
      header = false;
      return texts;
    };
    async function* chunks(): AsyncGenerator<string> {
      for await (const texts of s.usage.exportItems(caller(ctx), from, to, format)) yield* texts;
    }
    const body = Readable.from(chunks(), { highWaterMark: 1 });
    // Headers are gone once rows flow: a failure mid-export cuts the connection, so a client never takes a truncated file for a whole one.
    body.on('error', (err) => {
      ctx.state.log.error({ err }, 'usage export failed mid-stream');
      ctx.res.destroy();
    });
    ctx.set('Content-Disposition', 'attachment; filename="usage-items.csv"');
    ctx.type = 'text/csv';
    ctx.body = body;
  });

  return r;
}
