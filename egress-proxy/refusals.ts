// THE refusal table of the proxy: every way it answers a capsule's request
// itself (instead of forwarding it), with its HTTP status and the
// `x-capsule-egress-error` code, and the two writers (a node:http response,
// or a raw socket for CONNECT and protocol errors). Nothing else writes
// refusal statuses. docs/EGRESS.md sections 1, 2, 4 and 6 describe each.
import { STATUS_CODES, type OutgoingHttpHeaders, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';

export const REFUSALS = {
  bad_target: { status: 400, code: 'bad_target' },
  /** Non-TLS bytes in a CONNECT tunnel (no raw TCP protocols). */
  tunnel_not_tls: { status: 400, code: 'unsupported' },
  /** WebSocket and other `Upgrade` requests. */
  upgrade: { status: 501, code: 'unsupported' },
  /** Bytes node:http cannot parse as a request. */
  malformed_request: { status: 400, code: 'bad_request' },
  not_in_profile: { status: 403, code: 'not_in_profile' },
  not_in_declaration: { status: 403, code: 'not_in_declaration' },
  special_address: { status: 403, code: 'special_address' },
  host_header_mismatch: { status: 421, code: 'host_header_mismatch' },
  body_too_large_for_inspection: { status: 413, code: 'body_too_large_for_inspection' },
  inspection_budget_exhausted: { status: 429, code: 'inspection_budget_exhausted' },
  resolve_failed: { status: 502, code: 'resolve_failed' },
  resolve_timeout: { status: 504, code: 'resolve_failed' },
  admission_failed: { status: 502, code: 'internal' },
  // Upstream failures (the exchange is recorded with the same outcome).
  upstream_unreachable: { status: 502, code: 'upstream_unreachable' },
  upstream_tls_failed: { status: 502, code: 'upstream_tls_failed' },
  upstream_timeout: { status: 504, code: 'upstream_timeout' },
  response_too_large: { status: 502, code: 'response_too_large' },
  proxy_stopped: { status: 502, code: 'proxy_stopped' },
  tunnel_lost: { status: 500, code: 'internal' },
} as const satisfies Record<string, { status: number; code: string }>;

export type RefusalKind = keyof typeof REFUSALS;

const body = (detail: string): string => `capsule egress: ${detail}\n`;

/** Answers on a node:http response; once headers went out the only signal left is cutting the connection. */
export function refuse(res: ServerResponse, kind: RefusalKind, detail: string, extra: OutgoingHttpHeaders = {}): void {
  const row = REFUSALS[kind];
  if (res.headersSent) {
    res.destroy();
    return;
  }
  res.writeHead(row.status, {
    'content-type': 'text/plain; charset=utf-8',
    'x-capsule-egress-error': row.code,
    connection: 'close',
    ...extra,
  });
  res.end(body(detail));
}

/** Answers on a raw socket (CONNECT before the tunnel exists, upgrades, unparsable requests) and closes it. */
export function refuseRaw(sock: Socket, kind: RefusalKind, detail: string): void {
  const row = REFUSALS[kind];
  if (!sock.writable) {
    sock.destroy();
    return;
  }
  const text = body(detail);
  sock.end(
    `HTTP/1.1 ${row.status} ${STATUS_CODES[row.status] ?? ''}\r\n` +
      `content-type: text/plain; charset=utf-8\r\nx-capsule-egress-error: ${row.code}\r\n` +
      `content-length: ${Buffer.byteLength(text)}\r\nconnection: close\r\n\r\n${text}`,
  );
}
