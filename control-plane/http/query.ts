// One query parameter as a single string. Repeated (`?a=1&a=2`) is refused
// by name rather than read as missing or as a list.
import { invalid } from '../../shared/errors.js';
import type { Ctx } from './context.js';

/** The parameter's value; undefined when absent (or empty, when `required`, 400). */
export function queryParam(ctx: Ctx, name: string, required: true): string;
export function queryParam(ctx: Ctx, name: string, required?: false): string | undefined;
export function queryParam(ctx: Ctx, name: string, required = false): string | undefined {
  const v = ctx.query[name];
  if (Array.isArray(v)) throw invalid(name, 'query parameter given more than once');
  if (required && (v === undefined || v === '')) throw invalid(name, 'query parameter is required');
  return v;
}
