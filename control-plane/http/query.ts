// One query parameter as a single string. Repeated (`?a=1&a=2`) is refused
// by name rather than read as missing or as a list.
import { isUtf8 } from 'node:buffer';
import { invalid } from '../../shared/errors.js';
import { percentDecodeBytes } from '../../shared/node/utf8.js';
import type { Ctx } from './context.js';

/** The parameter's value; undefined when absent (or empty, when `required`, 400). */
export function queryParam(ctx: Ctx, name: string, required: true): string;
export function queryParam(ctx: Ctx, name: string, required?: false): string | undefined;
export function queryParam(ctx: Ctx, name: string, required = false): string | undefined {
  const v = ctx.query[name];
  if (Array.isArray(v)) throw invalid(name, 'query parameter given more than once');
  if (required && (v === undefined || v === '')) throw invalid(name, 'query parameter is required');
  // The parsed value has invalid UTF-8 replaced by U+FFFD (%FF and %FE would read alike): check the raw bytes.
  if (v !== undefined) {
    for (const pair of ctx.querystring.split('&')) {
      const eq = pair.indexOf('=');
      const key = percentDecodeBytes(eq < 0 ? pair : pair.slice(0, eq));
      if (key === null || key.toString('utf8') !== name) continue;
      const raw = percentDecodeBytes(eq < 0 ? '' : pair.slice(eq + 1));
      if (raw !== null && !isUtf8(raw)) throw invalid(name, 'must be valid UTF-8 (percent-encoded bytes)');
    }
  }
  return v;
}
