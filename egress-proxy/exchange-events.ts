// The activity events of one finished exchange, as a pure function of what
// it observed (docs/EGRESS.md section 5). exchange.ts gathers the facts while
// bytes flow; this module only shapes them.
import type { IncomingHttpHeaders } from 'node:http';
import type { EgressEvent, EgressOutcome, McpOutcome, Sha512, StreamingEgressChunk, TlsMetadata } from './events.js';
import { asSha512, canonicalRequest, requestCanonicalHash, sha512JcsOrNull } from './hashing.js';
import type { Segment } from './segments.js';

export interface ToolCall {
  id: string | number | null;
  toolName: string;
  args: unknown;
}

/** What one exchange observed, gathered by exchange.ts. */
export interface ExchangeRecord {
  exchange: number;
  startedAt: string;
  /** When the exchange ended (dates StreamingEgressCompleted). */
  endedAt: string;
  method: string;
  target: { scheme: 'http' | 'https'; host: string; port: number };
  pathAndQuery: string;
  requestHeaders: IncomingHttpHeaders;
  requestBodyHash: Sha512;
  requestBodyBytes: number;
  status: number | null;
  responseBodyHash: Sha512 | null;
  responseBodyBytes: number;
  streamed: boolean;
  tls: TlsMetadata | null;
  durationMs: number;
  outcome: EgressOutcome;
  /** Streamed responses: chunk and segment counts and the root over all chunks. */
  stream: { chunks: number; segments: number; root: Uint8Array } | null;
  /** An identified, forwarded tools/call and what became of its result. */
  tool: { call: ToolCall; result: { outcome: McpOutcome; hash: Sha512 | null } } | null;
}

const one = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v.join(', ') : v);

/** StreamingEgressCompleted (streams), SealedHttpRequest, McpToolInvoked (tool calls), in that order. */
export function exchangeEvents(r: ExchangeRecord): EgressEvent[] {
  const out: EgressEvent[] = [];
  if (r.stream)
    out.push({
      type: 'StreamingEgressCompleted',
      at: r.endedAt,
      exchange: r.exchange,
      chunks: r.stream.chunks,
      segments: r.stream.segments,
      total_bytes: r.responseBodyBytes,
      merkle_root: asSha512(r.stream.root),
      outcome: r.outcome,
    });
  const { scheme, host, port } = r.target;
  out.push({
    type: 'SealedHttpRequest',
    at: r.startedAt,
    exchange: r.exchange,
    method: r.method,
    scheme,
    host,
    port,
    request_canonical_hash: requestCanonicalHash(
      canonicalRequest(r.method, scheme, host, port, r.pathAndQuery, r.requestHeaders, r.requestBodyHash),
    ),
    request_body_hash: r.requestBodyHash,
    request_body_bytes: r.requestBodyBytes,
    status: r.status,
    response_body_hash: r.status === null ? null : r.responseBodyHash,
    response_body_bytes: r.responseBodyBytes,
    streamed: r.streamed,
    tls: r.tls,
    duration_ms: r.durationMs,
    outcome: r.outcome,
  });
  if (r.tool)
    out.push({
      type: 'McpToolInvoked',
      at: r.startedAt,
      exchange: r.exchange,
      tool_name: r.tool.call.toolName,
      tool_args_hash: sha512JcsOrNull(r.tool.call.args),
      tool_result_hash: r.tool.result.hash,
      duration_ms: r.durationMs,
      outcome: r.tool.result.outcome,
      client_session_id: one(r.requestHeaders['mcp-session-id']) ?? null,
    });
  return out;
}

/** One segment of a streamed response. */
export function segmentEvent(exchange: number, at: string, g: Segment): StreamingEgressChunk {
  return {
    type: 'StreamingEgressChunk',
    at,
    exchange,
    index: g.index,
    first_chunk: g.firstChunk,
    chunks: g.chunks,
    bytes: g.bytes,
    segment_root: asSha512(g.root),
  };
}
