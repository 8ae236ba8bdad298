// Test fixtures: a test PKI (CA the proxy trusts via extraCaPem), upstream
// HTTPS servers (JSON API, MCP JSON-RPC plain and SSE, hostile ones), a fake
// resolver, and real clients (curl, node, python3) run as child processes.
import { execFile } from 'node:child_process';
import { createHash, generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { createServer as createHttpServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type AddressInfo, type Server } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createTlsServer } from 'node:tls';
import forge from 'node-forge';
import type { EgressEvent, Resolver } from '../../egress-proxy/index.js';

export const sha512 = (b: string | Buffer) => `sha512:${createHash('sha512').update(b).digest('hex')}`;

function keyPair() {
  const kp = generateKeyPairSync('rsa', {
    modulusLength: 2048,
    publicKeyEncoding: { type: 'spki', format: 'pem' },
    privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
  });
  return {
    pub: forge.pki.publicKeyFromPem(kp.publicKey),
    priv: forge.pki.privateKeyFromPem(kp.privateKey) as forge.pki.rsa.PrivateKey,
    privPem: kp.privateKey,
  };
}

function cert(
  subjectCn: string,
  pub: forge.pki.PublicKey,
  issuer: { cn: string; priv: forge.pki.rsa.PrivateKey },
  ca: boolean,
  names: string[],
) {
  const c = forge.pki.createCertificate();
  c.publicKey = pub;
  // 16 hex digits starting with 1: a positive INTEGER whose first byte is never 0x00. The former
  // '0' + 16 digits made the first byte 0x00 before a byte below 0x80 one time in 32, which
  // OpenSSL 3 refuses as illegal DER padding (a flaky Stripe stand-in and egress fixtures).
  c.serialNumber =
    '1' +
    createHash('sha1')
      .update(subjectCn + Math.random())
      .digest('hex')
      .slice(0, 15);
  c.validity.notBefore = new Date(Date.now() - 3600_000);
  c.validity.notAfter = new Date(Date.now() + 86400_000);
  c.setSubject([{ name: 'commonName', value: subjectCn }]);
  c.setIssuer([{ name: 'commonName', value: issuer.cn }]);
  c.setExtensions(
    ca
      ? [
          { name: 'basicConstraints', cA: true, critical: true },
          { name: 'keyUsage', keyCertSign: true, cRLSign: true, critical: true },
          { name: 'subjectKeyIdentifier' },
        ]
      : [
          { name: 'basicConstraints', cA: false },
          { name: 'keyUsage', digitalSignature: true, keyEncipherment: true },
          { name: 'extKeyUsage', serverAuth: true },
          {
            name: 'subjectAltName',
            altNames: names.map((n) => (/^[\d.]+$/.test(n) ? { type: 7, ip: n } : { type: 2, value: n })),
          },
        ],
  );
  c.sign(issuer.priv, forge.md.sha256.create());
  return forge.pki.certificateToPem(c);
}

export interface Pki {
  caPem: string;
  serverKey: string;
  serverCert: string;
  rogueKey: string;
  rogueCert: string;
}

/** A test CA and a server cert for the test names; plus a self-signed "rogue" cert the proxy must not trust. */
export function makePki(names: string[]): Pki {
  const ca = keyPair();
  const caPem = cert('Egress Test CA', ca.pub, { cn: 'Egress Test CA', priv: ca.priv }, true, []);
  const srv = keyPair();
  const serverCert = cert(names[0] as string, srv.pub, { cn: 'Egress Test CA', priv: ca.priv }, false, names);
  const rogueCa = keyPair();
  const rogue = keyPair();
  const rogueCert = cert(names[0] as string, rogue.pub, { cn: 'Rogue CA', priv: rogueCa.priv }, false, names);
  return { caPem, serverKey: srv.privPem, serverCert, rogueKey: rogue.privPem, rogueCert };
}

export const listenLocal = (srv: Server) =>
  new Promise<number>((resolve) => srv.listen(0, '127.0.0.1', () => resolve((srv.address() as AddressInfo).port)));

function body(req: IncomingMessage): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const c: Buffer[] = [];
    req.on('data', (d: Buffer) => c.push(d));
    req.on('end', () => resolve(Buffer.concat(c)));
    req.on('error', reject);
  });
}

/** What the upstream saw, so tests can prove a denied call never arrived. */
export interface Seen {
  method: string;
  path: string;
  host: string | undefined;
  body: Buffer;
  sni?: string;
}

/** The routes of the test upstream (JSON API + MCP server). */
export function upstreamHandler(seen: Seen[]) {
  return async (req: IncomingMessage, res: ServerResponse) => {
    const b = await body(req);
    seen.push({
      method: req.method ?? '',
      path: req.url ?? '',
      host: req.headers.host,
      body: b,
      sni: (req.socket as { servername?: string }).servername,
    });
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/json') {
      const out = JSON.stringify({ ok: true, echo_sha512: sha512(b), n: Number(url.searchParams.get('n') ?? 0) });
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(out) });
      res.end(out);
    } else if (url.pathname === '/mcp' || url.pathname === '/mcp-sse') {
      let msg: { id?: unknown; method?: string; params?: { name?: string; arguments?: unknown } } | unknown[];
      try {
        msg = JSON.parse(b.toString());
      } catch {
        msg = {};
      }
      const reply = (m: { id?: unknown; method?: string; params?: { name?: string; arguments?: unknown } }) =>
        m.method === 'tools/call'
          ? {
              jsonrpc: '2.0',
              id: m.id,
              result: {
                content: [
                  { type: 'text', text: `ran ${m.params?.name} with ${JSON.stringify(m.params?.arguments ?? {})}` },
                ],
                isError: false,
              },
            }
          : { jsonrpc: '2.0', id: m.id, result: {} };
      const out = Array.isArray(msg) ? msg.map((m) => reply(m as never)) : reply(msg as never);
      if (url.pathname === '/mcp-sse') {
        res.writeHead(200, { 'content-type': 'text/event-stream', 'mcp-session-id': 'sess-1' });
        res.write(': keep-alive comment\n\n');
        res.write(
          'event: message\ndata: {"jsonrpc":"2.0","method":"notifications/progress","params":{"progress":1}}\n\n',
        );
        setTimeout(() => {
          res.write(`event: message\ndata: ${JSON.stringify(out)}\n\n`);
          res.end();
        }, 20);
      } else {
        const text = JSON.stringify(out);
        res.writeHead(200, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
        res.end(text);
      }
    } else if (url.pathname === '/delay') {
      setTimeout(
        () => {
          res.writeHead(200, { 'content-length': 7 });
          res.end('delayed');
        },
        Number(url.searchParams.get('ms') ?? 500),
      );
    } else if (url.pathname === '/huge') {
      res.writeHead(200, {
        'content-type': 'application/octet-stream',
        'content-length': String(1024 * 1024 * 1024 * 4),
      });
      res.end();
    } else if (url.pathname === '/huge-chunked') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      const block = Buffer.alloc(64 * 1024, 7);
      let sent = 0;
      const pump = () => {
        while (sent < 64 * 1024 * 1024) {
          sent += block.length;
          if (!res.write(block)) {
            res.once('drain', pump);
            return;
          }
        }
        res.end();
      };
      res.on('close', () => {
        sent = Infinity;
      });
      pump();
    } else if (url.pathname === '/stream') {
      res.writeHead(200, { 'content-type': 'application/octet-stream' });
      res.write(Buffer.alloc(70000, 1));
      res.end(Buffer.alloc(10, 2));
    } else {
      res.writeHead(404, { 'content-length': 0 });
      res.end();
    }
  };
}

export async function startUpstreams(pki: Pki) {
  const seen: Seen[] = [];
  const https = createHttpsServer({ key: pki.serverKey, cert: pki.serverCert }, upstreamHandler(seen));
  const http = createHttpServer(upstreamHandler(seen));
  const rogue = createHttpsServer({ key: pki.rogueKey, cert: pki.rogueCert }, upstreamHandler(seen));
  // Slow loris: TLS is fine, then response headers drip one line every 300 ms, forever.
  const loris = createTlsServer({ key: pki.serverKey, cert: pki.serverCert }, (s) => {
    s.on('error', () => {});
    s.once('data', () => {
      s.write('HTTP/1.1 200 OK\r\n');
      const t = setInterval(() => {
        if (s.writable) s.write('x-drip: 1\r\n');
      }, 300);
      s.on('close', () => clearInterval(t));
    });
  });
  // Response headers far over Node's 16 KiB header limit.
  const fatHeaders = createTlsServer({ key: pki.serverKey, cert: pki.serverCert }, (s) => {
    s.on('error', () => {});
    s.once('data', () => s.end(`HTTP/1.1 200 OK\r\nx-fat: ${'a'.repeat(64 * 1024)}\r\ncontent-length: 0\r\n\r\n`));
  });
  // A status line Node's parser accepts but no HTTP server may send back (below 100).
  const badStatus = createTlsServer({ key: pki.serverKey, cert: pki.serverCert }, (s) => {
    s.on('error', () => {});
    s.once('data', () => s.end('HTTP/1.1 099 Odd\r\ncontent-length: 0\r\n\r\n'));
  });
  // TLS handshake failure: accepts TCP, answers the ClientHello with garbage and closes.
  const badTls = createNetServer((s) => {
    s.on('error', () => {});
    s.once('data', () => s.end(Buffer.from('not tls at all\r\n')));
  });
  const ports = {
    https: await listenLocal(https as unknown as Server),
    http: await listenLocal(http as unknown as Server),
    rogue: await listenLocal(rogue as unknown as Server),
    loris: await listenLocal(loris as unknown as Server),
    badTls: await listenLocal(badTls),
    fatHeaders: await listenLocal(fatHeaders as unknown as Server),
    badStatus: await listenLocal(badStatus as unknown as Server),
  };
  // A port with nothing listening: outside the ephemeral range (32768-60999), so that no other test's
  // listen(0) takes it between here and its use; bound once to check it is free, then closed.
  for (;;) {
    const port = 20000 + Math.floor(Math.random() * 10000);
    const tmp = createNetServer();
    const free = await new Promise<boolean>((res) => {
      tmp.once('error', () => res(false));
      tmp.listen(port, '127.0.0.1', () => res(true));
    });
    if (!free) continue;
    await new Promise((r) => tmp.close(r));
    ports['refused' as keyof typeof ports] = port;
    break;
  }
  const all = [https, http, rogue, loris, badTls, fatHeaders, badStatus] as unknown as Server[];
  return {
    seen,
    ports: ports as typeof ports & { refused: number },
    close: () =>
      Promise.all(
        all.map(
          (s) =>
            new Promise((r) => {
              (s as unknown as { closeAllConnections?: () => void }).closeAllConnections?.();
              s.close(r);
            }),
        ),
      ),
  };
}

/** Fake DNS: test names map to 127.0.0.1; anything else fails like NXDOMAIN. Records every lookup. */
export function fakeResolver(map: Record<string, string>, lookups: string[] = []): Resolver {
  return async (name) => {
    lookups.push(name);
    const a = map[name];
    if (!a) throw Object.assign(new Error(`ENOTFOUND ${name}`), { code: 'ENOTFOUND' });
    return [{ address: a, family: a.includes(':') ? 6 : 4 }];
  };
}

export function tempDir(prefix: string) {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return {
    dir,
    write: (name: string, text: string) => {
      const p = join(dir, name);
      writeFileSync(p, text);
      return p;
    },
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

export interface RunResult {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs a client without blocking this process's event loop (the proxy and upstreams live here). */
export function run(cmd: string, args: string[], env: Record<string, string> = {}, input?: string): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = execFile(
      cmd,
      args,
      {
        env: { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? '/tmp', ...env },
        timeout: 60_000,
        maxBuffer: 64 * 1024 * 1024,
      },
      (err, stdout, stderr) =>
        resolve({
          code: err ? ((err as { code?: number }).code ?? 1) : 0,
          stdout: String(stdout),
          stderr: String(stderr),
        }),
    );
    if (input !== undefined) child.stdin?.end(input);
  });
}

export function eventsOf<T extends EgressEvent['type']>(
  events: EgressEvent[],
  type: T,
): Extract<EgressEvent, { type: T }>[] {
  return events.filter((e) => e.type === type) as Extract<EgressEvent, { type: T }>[];
}
