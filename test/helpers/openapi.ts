// Validates a live response against the OpenAPI registry: the operation is
// found by method and path, the status must be one the document lists, and a
// JSON body must parse with the listed schema (errors with ErrorEnvelope).
import { z } from 'zod';
import { OPERATIONS, SCHEMAS, type Operation } from '../../control-plane/http/openapi.js';
import { ERROR_TABLE } from '../../control-plane/http/errors.js';

const ALWAYS = [401, 429, 500];

function matches(o: Operation, method: string, path: string): boolean {
  if (o.method !== method.toLowerCase()) return false;
  const re = new RegExp(
    `^${o.path
      .replace(/[.]/g, '\\.')
      .replace(/:[A-Za-z_]+/g, '[^/]+')
      .replace(/\*[A-Za-z_]+/g, '.+')}$`,
  );
  return re.test(path.split('?')[0]!);
}

/** The registry operation serving `method path`; static segments win over parameters. */
export function findOperation(method: string, path: string): Operation | undefined {
  const found = OPERATIONS.filter((o) => matches(o, method, path));
  found.sort((a, b) => (a.path.match(/:/g)?.length ?? 0) - (b.path.match(/:/g)?.length ?? 0));
  return found[0];
}

/** Problems with the response, empty when it matches the document. */
export function conformance(
  method: string,
  path: string,
  status: number,
  body: unknown,
  contentType: string | null,
  /** Error statuses must be among the operation's listed ones (off: any status, envelope still checked). */
  strictStatus = true,
): string[] {
  const o = findOperation(method, path);
  if (!o) return [`${method} ${path}: not in the OpenAPI document`];
  const where = `${method} ${o.path} ${status}`;
  if (status >= 400) {
    const listed = new Set([...(o.auth ? ALWAYS : [500]), ...(o.errors ?? []), ...(o.mfa ? [403] : [])]);
    const problems: string[] = [];
    if (strictStatus && !listed.has(status) && status !== 404 && status !== 400)
      problems.push(`${where}: status not listed`);
    const r = SCHEMAS.ErrorEnvelope.safeParse(body);
    if (!r.success) problems.push(`${where}: ${z.prettifyError(r.error)}`);
    else {
      const code = (body as { error: { code: keyof typeof ERROR_TABLE } }).error.code;
      if (ERROR_TABLE[code].status !== status) problems.push(`${where}: code ${code} under the wrong status`);
    }
    return problems;
  }
  if (!(status in o.responses)) return [`${where}: status not listed`];
  const spec = o.responses[status];
  if (spec === null || spec === undefined)
    return body === undefined || body === '' ? [] : [`${where}: body on a no-content answer`];
  if (typeof spec !== 'string' && spec.json && contentType?.startsWith('application/json')) {
    const r = (SCHEMAS[spec.json] as z.ZodType).safeParse(body);
    return r.success ? [] : [`${where} (${spec.json}): ${z.prettifyError(r.error)}`];
  }
  if (typeof spec !== 'string') {
    return contentType?.startsWith(spec.media.split(';')[0]!) || spec.media === 'application/octet-stream'
      ? []
      : [`${where}: content type ${contentType}, document says ${spec.media}`];
  }
  if (!contentType?.startsWith('application/json')) return [`${where}: content type ${contentType}, expected JSON`];
  const r = (SCHEMAS[spec] as z.ZodType).safeParse(body);
  return r.success ? [] : [`${where} (${spec}): ${z.prettifyError(r.error)}`];
}
