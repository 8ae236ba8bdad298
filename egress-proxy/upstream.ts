// Upstream side: connection pools per proxy, the trust store (system roots +
// optional extra CA), TLS metadata and error classification.
import { createHash } from 'node:crypto';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { createSecureContext, getCACertificates, type SecureContext, type TLSSocket } from 'node:tls';
import type { EgressOutcome, TlsMetadata } from './events.js';

const trustCache = new Map<string, SecureContext>();

/**
 * Upstream trust: Node's default store, the operating system's store, and the
 * operator's extra CA (CAPSULE_EGRESS_EXTRA_CA, read by the caller). Built once
 * per distinct extra CA and shared read-only: building it parses ~150 roots.
 */
export function upstreamTrust(extraCaPem: string | undefined): SecureContext {
  const key = extraCaPem === undefined ? '' : createHash('sha256').update(extraCaPem).digest('hex');
  let ctx = trustCache.get(key);
  if (!ctx) {
    const roots = new Set([...getCACertificates('default'), ...getCACertificates('system')]);
    const ca = [...roots];
    if (extraCaPem !== undefined) ca.push(extraCaPem);
    ctx = createSecureContext({ ca, minVersion: 'TLSv1.2' });
    trustCache.set(key, ctx);
  }
  return ctx;
}

export interface Pools {
  http: HttpAgent;
  https: HttpsAgent;
}

/** Keep-alive pools for one capsule. Pool keys include the connected address and SNI, so one checked address never serves another name. */
export function createPools(maxSocketsPerDestination: number): Pools {
  // maxFreeSockets = maxSockets: a smaller free pool closes and re-handshakes upstream sockets under load.
  const opts = {
    keepAlive: true,
    maxSockets: maxSocketsPerDestination,
    maxFreeSockets: maxSocketsPerDestination,
    scheduling: 'lifo' as const,
  };
  return { http: new HttpAgent(opts), https: new HttpsAgent(opts) };
}

const tlsFacts = new WeakMap<TLSSocket, TlsMetadata>();

/** TLS facts of an established upstream connection; fixed after the handshake, so computed once per socket. */
export function tlsMetadata(socket: TLSSocket): TlsMetadata {
  let facts = tlsFacts.get(socket);
  if (!facts) {
    const raw = socket.getPeerCertificate(false)?.raw;
    const cipher = socket.getCipher();
    facts = {
      version: socket.getProtocol() ?? null,
      cipher: cipher?.standardName ?? cipher?.name ?? null,
      peer_certificate_sha256: raw ? `sha256:${createHash('sha256').update(raw).digest('hex')}` : null,
      validation: socket.authorized ? 'valid' : `failed:${String(socket.authorizationError ?? 'unknown')}`,
    };
    tlsFacts.set(socket, facts);
  }
  return { ...facts };
}

const TLS_CODES = /^(ERR_TLS_|ERR_SSL_|CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|HOSTNAME_MISMATCH|ERR_OSSL_)/;

/** Maps an upstream error to the recorded outcome and the status the capsule gets. */
export function classifyUpstreamError(err: NodeJS.ErrnoException & { library?: string }): {
  outcome: Extract<EgressOutcome, 'upstream_timeout' | 'upstream_tls_failed' | 'upstream_unreachable'>;
  status: 502 | 504;
  code: string;
} {
  const code = err.code ?? 'UNKNOWN';
  if (code === 'ETIMEDOUT' || code === 'UPSTREAM_TIMEOUT') return { outcome: 'upstream_timeout', status: 504, code };
  if (TLS_CODES.test(code) || err.library === 'SSL routines')
    return { outcome: 'upstream_tls_failed', status: 502, code };
  return { outcome: 'upstream_unreachable', status: 502, code };
}
