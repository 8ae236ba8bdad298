// Sends one signed webhook delivery over HTTPS (plain HTTP only on installs
// that allow private receivers). SSRF safety: the host is resolved here, at
// delivery time, every address is classified with the egress proxy's ranges,
// and the connection goes to the checked address (the socket's lookup is
// pinned to it, so a second DNS answer cannot swap it). Redirects are never
// followed; the whole attempt has one deadline; at most 1 KB of the response
// body is kept and at most 64 KB is read.
import { lookup as dnsLookup } from 'node:dns/promises';
import type { LookupAddress } from 'node:dns';
import { Agent as HttpAgent, request as httpRequest, type IncomingMessage } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { isIP } from 'node:net';
import { createSecureContext, rootCertificates } from 'node:tls';
import { addressClass, parseIp } from '../../egress-proxy/index.js';
import { WEBHOOK_RESPONSE_BODY_MAX, type WebhookSender, type WebhookSendResult } from '../domain/index.js';

/** Resolves a host name to its addresses (test seam; default: the system resolver). */
export type WebhookResolver = (host: string) => Promise<{ address: string; family: number }[]>;

export interface WebhookSenderOptions {
  /** Loopback, private and link-local receivers allowed (development, tests, self-hosted). */
  allowPrivate: boolean;
  /** PEM trust anchors added to the system roots (development receivers). */
  extraCaPem: string | null;
  resolver?: WebhookResolver;
  /** Open connections kept per receiver host. */
  maxSocketsPerHost?: number;
  /** The only trust anchors (PEM), replacing the system roots: a customer's own CA. */
  caPem?: string;
  /** Client certificate and key (PEM) presented to the receiver: mutual TLS. */
  clientCertPem?: string;
  clientKeyPem?: string;
}

/** Bytes of a response read before the connection is dropped. */
const READ_MAX = 64 * 1024;
/** Address kinds a private-allowing install accepts; metadata, unspecified, multicast and broadcast never. */
const PRIVATE_OK = new Set(['loopback', 'private', 'link_local']);

const systemResolver: WebhookResolver = async (host) =>
  (await dnsLookup(host, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family }));

export class HttpsWebhookSender implements WebhookSender {
  private readonly ca: string[] | undefined;
  private readonly https: HttpsAgent;
  private readonly http: HttpAgent;
  private readonly resolve: WebhookResolver;

  constructor(private readonly o: WebhookSenderOptions) {
    this.ca = o.caPem ? [o.caPem] : o.extraCaPem ? [...rootCertificates, o.extraCaPem] : undefined;
    const sockets = o.maxSocketsPerHost ?? 64;
    const client = o.clientCertPem && o.clientKeyPem ? { cert: o.clientCertPem, key: o.clientKeyPem } : null;
    // One TLS context for every connection: parsing the system roots plus the extra anchors per
    // connection cost milliseconds of event-loop time each (measured in docs/PERFORMANCE.md).
    this.https = new HttpsAgent({
      keepAlive: true,
      maxSockets: sockets,
      ...(this.ca || client
        ? { secureContext: createSecureContext({ ...(this.ca ? { ca: this.ca } : {}), ...(client ?? {}) }) }
        : {}),
    });
    this.http = new HttpAgent({ keepAlive: true, maxSockets: sockets });
    this.resolve = o.resolver ?? systemResolver;
  }

  /** Why an address may not receive deliveries, or null. */
  private refuseAddress(address: string): string | null {
    const ip = parseIp(address);
    if (!ip) return `not an IP address: ${address}`;
    const kind = addressClass(ip);
    if (kind === 'public') return null;
    if (this.o.allowPrivate && PRIVATE_OK.has(kind)) return null;
    return `${kind.replace('_', '-')} address ${address} refused${PRIVATE_OK.has(kind) ? ' (private receivers are not allowed on this install)' : ''}`;
  }

  refusal(url: string): string | null {
    const host = hostOf(new URL(url));
    return isIP(host) ? this.refuseAddress(host) : null;
  }

  async send(
    url: string,
    headers: Record<string, string>,
    body: string,
    timeoutMs: number,
  ): Promise<WebhookSendResult> {
    const started = performance.now();
    const took = (): number => performance.now() - started;
    const fail = (error: string): WebhookSendResult => ({ status: null, body: null, duration_ms: took(), error });
    let u: URL;
    try {
      u = new URL(url);
    } catch {
      return fail('invalid URL');
    }
    const host = hostOf(u);
    let addrs: { address: string; family: number }[];
    try {
      addrs = isIP(host) ? [{ address: host, family: isIP(host) }] : await withTimeout(this.resolve(host), timeoutMs);
    } catch (e) {
      return fail(`dns: ${(e as NodeJS.ErrnoException).code ?? (e as Error).message}`);
    }
    let target: { address: string; family: number } | null = null;
    let why = 'no address';
    for (const a of addrs) {
      const r = this.refuseAddress(a.address);
      if (r === null) {
        target = a;
        break;
      }
      why = r;
    }
    if (!target) return fail(`refused: ${host} resolves to ${why}`);
    const pinned = target;
    const deadline = Math.max(1, timeoutMs - took());
    const tls = u.protocol === 'https:';
    return new Promise<WebhookSendResult>((resolve) => {
      let settled = false;
      const finish = (r: WebhookSendResult): void => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(r);
      };
      const req = (tls ? httpsRequest : httpRequest)({
        protocol: u.protocol,
        hostname: host,
        port: u.port || (tls ? 443 : 80),
        path: `${u.pathname}${u.search}`,
        method: 'POST',
        headers: { ...headers, 'content-length': String(Buffer.byteLength(body)) },
        agent: tls ? this.https : this.http,
        ...(tls && !isIP(host) ? { servername: host } : {}),
        // The connection goes to the address checked above, whatever DNS answers now.
        lookup: ((_h: string, opts: { all?: boolean }, cb: (...a: unknown[]) => void) => {
          if (opts.all) cb(null, [{ address: pinned.address, family: pinned.family } as LookupAddress]);
          else cb(null, pinned.address, pinned.family);
        }) as never,
      });
      const timer = setTimeout(() => {
        req.destroy();
        finish(fail(`timeout after ${timeoutMs} ms`));
      }, deadline);
      req.on('error', (e: NodeJS.ErrnoException) => {
        const code = e.code ?? e.message;
        finish(fail(/CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO|HOSTNAME/i.test(code) ? `tls: ${code}` : `connect: ${code}`));
      });
      req.on('response', (res: IncomingMessage) => {
        const kept: Buffer[] = [];
        let keptBytes = 0;
        let read = 0;
        const done = (): void =>
          finish({
            status: res.statusCode ?? null,
            body: Buffer.concat(kept).toString('utf8'),
            duration_ms: took(),
            error: null,
          });
        res.on('data', (chunk: Buffer) => {
          read += chunk.length;
          if (keptBytes < WEBHOOK_RESPONSE_BODY_MAX) {
            const part = chunk.subarray(0, WEBHOOK_RESPONSE_BODY_MAX - keptBytes);
            kept.push(part);
            keptBytes += part.length;
          }
          if (read > READ_MAX) {
            done();
            res.destroy();
          }
        });
        res.on('end', done);
        res.on('error', done);
        res.on('close', done);
      });
      req.end(body);
    });
  }

  close(): void {
    this.https.destroy();
    this.http.destroy();
  }
}

function hostOf(u: URL): string {
  return u.hostname.startsWith('[') ? u.hostname.slice(1, -1) : u.hostname;
}

async function withTimeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let t: NodeJS.Timeout | undefined;
  try {
    return await Promise.race([
      p,
      new Promise<never>((_, rej) => {
        t = setTimeout(() => rej(new Error('timeout')), ms);
      }),
    ]);
  } finally {
    clearTimeout(t);
  }
}
