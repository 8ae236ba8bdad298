// MCP tool policy on outbound JSON-RPC bodies (SPEC items 8c and 9). Pure:
// the proxy hands over the buffered request body, this decides.
import { parse } from 'jsonrpc-lite';

/** Capsulefile mcp_policy. Absent = unrestricted at tool level. */
export interface McpPolicy {
  /** Whitelist: when present, only these tool names may be called (an empty list allows none). */
  allowed_tools?: string[];
  /** Blocklist: these tool names are never called; wins over allowed_tools. */
  prohibited_tools?: string[];
}

export type FailOpenReason = 'compressed_body' | 'batch_array' | 'malformed_envelope';

export type Inspection =
  /** Nothing to check: empty body, or a single valid JSON-RPC message that is not tools/call. */
  | { kind: 'not_tools_call' }
  /** SPEC item 9: forwarded without a tool check (the destination check still applied). */
  | { kind: 'fail_open'; reason: FailOpenReason }
  | { kind: 'tools_call'; id: string | number | null; notification: boolean; toolName: string; args: unknown };

const decoder = new TextDecoder('utf-8', { fatal: true });

/**
 * Classifies a request body. `contentEncoding` is the request's
 * Content-Encoding header; any coding other than identity is not inspected.
 */
export function inspectBody(body: Buffer, contentEncoding: string | undefined): Inspection {
  if (
    contentEncoding !== undefined &&
    contentEncoding.trim() !== '' &&
    contentEncoding.trim().toLowerCase() !== 'identity'
  ) {
    return { kind: 'fail_open', reason: 'compressed_body' };
  }
  if (body.length === 0) return { kind: 'not_tools_call' };
  let text: string;
  try {
    text = decoder.decode(body);
  } catch {
    return { kind: 'fail_open', reason: 'malformed_envelope' };
  }
  const parsed = parse(text);
  if (Array.isArray(parsed)) return { kind: 'fail_open', reason: 'batch_array' };
  if (parsed.type === 'invalid') return { kind: 'fail_open', reason: 'malformed_envelope' };
  if (parsed.type !== 'request' && parsed.type !== 'notification') return { kind: 'not_tools_call' };
  const payload = parsed.payload as { method: string; params?: unknown; id?: string | number };
  if (payload.method !== 'tools/call') return { kind: 'not_tools_call' };
  const params = payload.params as { name?: unknown; arguments?: unknown } | undefined;
  if (typeof params !== 'object' || params === null || Array.isArray(params) || typeof params.name !== 'string') {
    return { kind: 'fail_open', reason: 'malformed_envelope' };
  }
  return {
    kind: 'tools_call',
    id: parsed.type === 'request' ? (payload.id ?? null) : null,
    notification: parsed.type === 'notification',
    toolName: params.name,
    args: params.arguments ?? {},
  };
}

/** Exact, case-sensitive name match. No policy = allowed. */
export function toolAllowed(policy: McpPolicy | undefined, toolName: string): boolean {
  if (!policy) return true;
  if (policy.prohibited_tools?.includes(toolName)) return false;
  if (policy.allowed_tools && !policy.allowed_tools.includes(toolName)) return false;
  return true;
}

/** JSON-RPC error code used for a denied tool (implementation-defined server error range). */
export const TOOL_DENIED_CODE = -32001;

/** The JSON-RPC error body returned (HTTP 200) for a denied call. Names the tool the client itself sent. */
export function denialBody(id: string | number | null, toolName: string): string {
  return JSON.stringify({
    jsonrpc: '2.0',
    id,
    error: {
      code: TOOL_DENIED_CODE,
      message: `tool "${toolName}" is not allowed by this capsule's mcp_policy`,
      data: { reason: 'mcp_policy_denied', tool: toolName },
    },
  });
}

/** Shape check of a Capsulefile mcp_policy; problem names the field. */
export function checkMcpPolicy(
  input: unknown,
): { ok: true; value: McpPolicy } | { ok: false; field: string; message: string } {
  if (typeof input !== 'object' || input === null || Array.isArray(input))
    return { ok: false, field: 'mcp_policy', message: 'mcp_policy: must be an object' };
  const out: McpPolicy = {};
  for (const key of ['allowed_tools', 'prohibited_tools'] as const) {
    const v = (input as Record<string, unknown>)[key];
    if (v === undefined) continue;
    if (!Array.isArray(v))
      return { ok: false, field: `mcp_policy.${key}`, message: `mcp_policy.${key}: must be an array of strings` };
    for (let i = 0; i < v.length; i++) {
      if (typeof v[i] !== 'string' || (v[i] as string).length === 0) {
        return {
          ok: false,
          field: `mcp_policy.${key}[${i}]`,
          message: `mcp_policy.${key}[${i}]: must be a non-empty string`,
        };
      }
    }
    out[key] = [...(v as string[])];
  }
  return { ok: true, value: out };
}
