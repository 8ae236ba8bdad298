// Per-source connection cap on the node:http listener. A client holding many
// idle or half-open sockets exhausts file descriptors and refuses everyone
// (docs/SECURITY.md "The HTTP edge"); here each source address (IPv6: its
// /64, which one host controls) may hold at most `max` open connections. A
// connection over the cap gets one pre-built 429 and is closed: it is never
// handed a request parser, so nothing it sends reaches the application.
import { randomBytes } from 'node:crypto';
import type { Server } from 'node:http';
import { isIPv6, type Socket } from 'node:net';
import { ERROR_TABLE } from './errors.js';

/** Counting key of a remote address: IPv4 (also IPv4-mapped IPv6) as is, IPv6 by its /64 prefix. */
export function sourceKey(address: string | undefined): string {
  if (!address) return '?';
  if (address.startsWith('::ffff:') && address.includes('.')) return address.slice(7);
  if (!isIPv6(address)) return address;
  const [head = '', tail = ''] = address.split('::');
  const h = head === '' ? [] : head.split(':');
  const t = address.includes('::') ? (tail === '' ? [] : tail.split(':')) : [];
  const groups = [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  return `${groups
    .slice(0, 4)
    .map((g) => parseInt(g, 16).toString(16))
    .join(':')}::/64`;
}

/** Raw HTTP/1.1 429 in the SPEC envelope; written without parsing anything the client sent. */
function refusal(docsUrl: string, max: number, retryAfter: number, requestId: string): Buffer {
  const row = ERROR_TABLE.rate_limited;
  const body = JSON.stringify({
    error: {
      type: row.type,
      code: 'rate_limited',
      message: `too many open connections from this address (at most ${max}); close idle connections and retry`,
      doc_url: `${docsUrl}/errors/rate_limited`,
      request_id: requestId,
      retry_after: retryAfter,
    },
  });
  return Buffer.from(
    `HTTP/1.1 429 Too Many Requests\r\nContent-Type: application/json; charset=utf-8\r\n` +
      `Content-Length: ${Buffer.byteLength(body)}\r\nRetry-After: ${retryAfter}\r\n` +
      `X-Svc-Request-Id: ${requestId}\r\nX-Content-Type-Options: nosniff\r\nConnection: close\r\n\r\n${body}`,
  );
}

export interface ConnectionGuard {
  /** Open connections per source key (for tests and diagnostics). */
  open(key: string): number;
  /** Connections refused since start. */
  refused(): number;
}

/**
 * Installs the cap on `server` (before node:http's own connection handler).
 * `docsUrl` is resolved lazily: it may depend on the port chosen at listen.
 */
export function capConnectionsPerSource(server: Server, max: number, docsUrl: () => string): ConnectionGuard {
  const counts = new Map<string, number>();
  let refusedCount = 0;
  const over = new WeakSet<Socket>();
  // A refusal's request id: a random prefix per listener and a counter. Unique without asking the
  // system's random source for each connection of a flood (that took 12 % of serving one, measured).
  const idPrefix = randomBytes(8).toString('hex');
  let seq = 0;
  server.prependListener('connection', (socket: Socket) => {
    const key = sourceKey(socket.remoteAddress);
    const n = counts.get(key) ?? 0;
    if (n >= max) {
      over.add(socket);
      refusedCount++;
      return;
    }
    counts.set(key, n + 1);
    socket.once('close', () => {
      const left = (counts.get(key) ?? 1) - 1;
      if (left <= 0) counts.delete(key);
      else counts.set(key, left);
    });
  });
  // After node:http has attached its parser: stop reading (nothing is parsed), answer, close.
  server.on('connection', (socket: Socket) => {
    if (!over.has(socket)) return;
    socket.pause();
    socket.on('error', () => undefined);
    socket.setTimeout(5_000, () => socket.destroy());
    const requestId = `req_${idPrefix}${(seq++ >>> 0).toString(16).padStart(8, '0')}`;
    socket.end(refusal(docsUrl(), max, 1, requestId), () => socket.destroy());
  });
  return { open: (key) => counts.get(key) ?? 0, refused: () => refusedCount };
}
