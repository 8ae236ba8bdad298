// Finds the JSON-RPC response to an allowed tools/call in the (bounded) copy
// of the upstream response body, plain JSON or SSE, and hashes it.
import type { McpOutcome, Sha512 } from './events.js';
import { sha512JcsOrNull } from './hashing.js';

function* sseDataPayloads(text: string): Generator<string> {
  for (const event of text.split(/\r\n\r\n|\n\n|\r\r/)) {
    const data: string[] = [];
    for (const line of event.split(/\r\n|\n|\r/)) {
      if (line.startsWith('data:')) data.push(line.slice(line.startsWith('data: ') ? 6 : 5));
    }
    if (data.length) yield data.join('\n');
  }
}

function matchResponse(msg: unknown, id: string | number | null): Record<string, unknown> | null {
  const list = Array.isArray(msg) ? msg : [msg];
  for (const m of list) {
    if (typeof m !== 'object' || m === null) continue;
    const o = m as Record<string, unknown>;
    if (o.jsonrpc === '2.0' && o.id === id && ('result' in o || 'error' in o)) return o;
  }
  return null;
}

/** The McpToolInvoked outcome and result hash for one response. */
export function mcpResult(
  status: number,
  contentType: string | undefined,
  body: Buffer | null,
  id: string | number | null,
): { outcome: McpOutcome; hash: Sha512 | null } {
  if (status < 200 || status > 299) return { outcome: 'http_error', hash: null };
  if (body === null) return { outcome: 'result_too_large', hash: null };
  const text = body.toString('utf8');
  const candidates = contentType?.toLowerCase().includes('text/event-stream') ? [...sseDataPayloads(text)] : [text];
  for (const c of candidates) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(c);
    } catch {
      continue;
    }
    const r = matchResponse(parsed, id);
    if (!r) continue;
    if ('error' in r) return { outcome: 'rpc_error', hash: sha512JcsOrNull(r.error) };
    const result = r.result as { isError?: unknown } | null;
    return {
      outcome: result !== null && typeof result === 'object' && result.isError === true ? 'tool_error' : 'success',
      hash: sha512JcsOrNull(r.result),
    };
  }
  return { outcome: 'no_result', hash: null };
}
