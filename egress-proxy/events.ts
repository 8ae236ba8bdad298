// Activity events the proxy emits (SPEC "Activity trail"). They carry hashes
// and metadata only: never body bytes, URLs, paths, query strings or header
// values. The recorder (control plane) assigns `seq` when it appends them.

/** "sha512:<128 hex>" */
export type Sha512 = `sha512:${string}`;

export interface TlsMetadata {
  /** e.g. "TLSv1.3"; null when the handshake did not complete. */
  version: string | null;
  /** IANA cipher suite name, e.g. "TLS_AES_256_GCM_SHA384"; null when the handshake did not complete. */
  cipher: string | null;
  /** "sha256:<hex>" of the upstream leaf certificate's DER. */
  peer_certificate_sha256: string | null;
  /** "valid": chain and hostname verified against system roots (+ extra CA); otherwise "failed:<openssl code>". */
  validation: string;
}

interface Base {
  at: string;
}

export type EgressOutcome =
  | 'completed' // upstream answered and the whole body passed through
  | 'upstream_unreachable' // connection refused / reset / DNS failure before a response
  | 'upstream_tls_failed' // handshake or certificate validation failed: nothing was sent
  | 'upstream_timeout' // no response headers, or body idle, within the bound
  | 'response_too_large' // response exceeded the proxy's size bound and was cut
  | 'client_aborted' // the capsule closed the connection first
  | 'proxy_stopped'; // the capsule was being destroyed (stop()) while the exchange was in flight

export interface SealedHttpRequest extends Base {
  type: 'SealedHttpRequest';
  /** Per-proxy exchange number, links the streaming and MCP events of one exchange. */
  exchange: number;
  method: string;
  scheme: 'https' | 'http';
  host: string;
  port: number;
  /** SHA-512 over JCS of the documented canonical form (docs/EGRESS.md). */
  request_canonical_hash: Sha512;
  request_body_hash: Sha512;
  request_body_bytes: number;
  status: number | null;
  response_body_hash: Sha512 | null;
  response_body_bytes: number;
  streamed: boolean;
  tls: TlsMetadata | null;
  duration_ms: number;
  outcome: EgressOutcome;
}

export interface StreamingEgressStarted extends Base {
  type: 'StreamingEgressStarted';
  exchange: number;
  host: string;
  port: number;
  status: number;
  /** "sse" = one chunk per server-sent event; "blocks" = fixed-size blocks. */
  framing: 'sse' | 'blocks';
}

/** One segment of a stream: 2^k consecutive chunks (the last may be fewer), see segments.ts. */
export interface StreamingEgressChunk extends Base {
  type: 'StreamingEgressChunk';
  exchange: number;
  /** Segment number within the exchange, from 0. */
  index: number;
  first_chunk: number;
  chunks: number;
  bytes: number;
  /** RFC 6962 root (SHA-512) over the segment's chunk digests: a node of the tree whose root is merkle_root. */
  segment_root: Sha512;
}

export interface StreamingEgressCompleted extends Base {
  type: 'StreamingEgressCompleted';
  exchange: number;
  chunks: number;
  /** StreamingEgressChunk events of this exchange. */
  segments: number;
  total_bytes: number;
  /** RFC 6962 Merkle root (SHA-512) whose leaf data are the raw 64-byte chunk digests, in order. */
  merkle_root: Sha512;
  outcome: EgressOutcome;
}

/**
 * Events were dropped because the capsule's queue to the recorder was full
 * (the recorder fell behind); emitted once the queue drained, or at stop().
 * Same shape as the control plane's trail cap event.
 */
export interface ActivityTruncated extends Base {
  type: 'ActivityTruncated';
  dropped_events: number;
  first_dropped_type: string;
  reason: 'egress_event_queue_full';
}

export type McpOutcome = 'success' | 'tool_error' | 'rpc_error' | 'http_error' | 'no_result' | 'result_too_large';

export interface McpToolInvoked extends Base {
  type: 'McpToolInvoked';
  exchange: number;
  tool_name: string;
  /** SHA-512 of JCS(params.arguments), {} when absent. */
  /** null when the arguments are not canonicalizable JSON data (e.g. nested deeper than JCS allows). */
  tool_args_hash: Sha512 | null;
  /** SHA-512 of JCS(result) (or of JCS(error) for a JSON-RPC error); null when no response could be read. */
  tool_result_hash: Sha512 | null;
  duration_ms: number;
  outcome: McpOutcome;
  /** Mcp-Session-Id request header, if the client sent one (a server-issued session label, not customer data). */
  client_session_id: string | null;
}

export type EgressEvent =
  | SealedHttpRequest
  | StreamingEgressStarted
  | StreamingEgressChunk
  | StreamingEgressCompleted
  | McpToolInvoked
  | ActivityTruncated;

/** Refusals are not activity events (nothing left the capsule); they go to an optional operator hook. */
export interface EgressRefusal {
  at: string;
  host: string;
  port: number;
  reason:
    | 'not_in_profile'
    | 'not_in_declaration'
    | 'special_address'
    | 'bad_target'
    | 'resolve_failed'
    | 'mcp_tool_denied'
    | 'body_too_large_for_inspection'
    | 'inspection_budget_exhausted'
    | 'host_header_mismatch'
    | 'unsupported';
  detail?: string;
}
