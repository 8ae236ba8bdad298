// The request a piece of work belongs to, carried across awaits
// (AsyncLocalStorage): the HTTP edge sets it, the runner client puts it on
// each frame, the runner names it in its log lines and echoes it back.
import { AsyncLocalStorage } from 'node:async_hooks';

export interface RequestTrace {
  request_id: string;
  /** The caller's X-Svc-Trace-Id, when it sent a well-formed one. */
  trace_id: string | null;
}

export const requestTrace = new AsyncLocalStorage<RequestTrace>();

const ID_RE = /^[A-Za-z0-9._:-]{1,128}$/;

/** A frame's `trace` member if well-formed, else null (it is only ever logged). */
export function traceOf(v: unknown): RequestTrace | null {
  if (typeof v !== 'object' || v === null) return null;
  const { request_id: r, trace_id: t } = v as Record<string, unknown>;
  if (typeof r !== 'string' || !ID_RE.test(r)) return null;
  return { request_id: r, trace_id: typeof t === 'string' && ID_RE.test(t) ? t : null };
}
