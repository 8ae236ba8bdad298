// Hash helpers and the request canonical form (documented in docs/EGRESS.md).
import { createHash } from 'node:crypto';
import type { Sha512 } from './events.js';
import { canonicalize, tryCanonicalize } from '../shared/proof/index.js';

export const sha512Hex = (data: Uint8Array | string): Sha512 =>
  `sha512:${createHash('sha512').update(data).digest('hex')}`;
export const asSha512 = (digest: Uint8Array): Sha512 =>
  `sha512:${Buffer.from(digest.buffer, digest.byteOffset, digest.byteLength).toString('hex')}`;
/** SHA-512 of the RFC 8785 form of a value we built ourselves (always JSON data). */
export const sha512Jcs = (value: unknown): Sha512 => sha512Hex(canonicalize(value));
/** Same for values parsed from the wire: null when they are not canonicalizable (e.g. nested deeper than JCS allows). */
export const sha512JcsOrNull = (value: unknown): Sha512 | null => {
  const c = tryCanonicalize(value);
  return c === undefined ? null : sha512Hex(c);
};

/**
 * Request headers that enter the canonical form: they change what the
 * upstream does with the body. Credentials (authorization, cookie) and
 * hop-by-hop headers are left out on purpose.
 */
export const CANONICAL_HEADERS = ['accept', 'content-encoding', 'content-type', 'mcp-session-id'] as const;

export interface CanonicalRequest {
  v: 1;
  method: string;
  /** scheme://host[:port]path?query, host lower-case, default port omitted. */
  url: string;
  headers: Record<string, string>;
  body_sha512: Sha512;
}

export function canonicalRequest(
  method: string,
  scheme: 'http' | 'https',
  host: string,
  port: number,
  pathAndQuery: string,
  headers: Record<string, string | string[] | undefined>,
  bodyHash: Sha512,
): CanonicalRequest {
  const defaultPort = scheme === 'https' ? 443 : 80;
  const h = host.includes(':') ? `[${host}]` : host;
  const selected: Record<string, string> = {};
  for (const name of CANONICAL_HEADERS) {
    const v = headers[name];
    if (v !== undefined) selected[name] = Array.isArray(v) ? v.join(', ') : v;
  }
  return {
    v: 1,
    method: method.toUpperCase(),
    url: `${scheme}://${h}${port === defaultPort ? '' : `:${port}`}${pathAndQuery}`,
    headers: selected,
    body_sha512: bodyHash,
  };
}

export const requestCanonicalHash = (c: CanonicalRequest): Sha512 => sha512Jcs(c);
