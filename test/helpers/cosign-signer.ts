// A customer's co-signing service for tests and benchmarks: an HTTPS server
// on loopback that requires a client certificate from a given CA (mutual
// TLS) and signs each posted event hash; certificates are made with the
// openssl CLI, as an operator would make them.
import { execFileSync } from 'node:child_process';
import { constants, sign, type KeyObject } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';

/** An EC P-256 CA, and leaves it issues, by the openssl CLI (as an operator would make them). */
export function pki(dir: string) {
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'pipe' });
  const ca = (name: string) => {
    run([
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-subj',
      `/CN=${name}`,
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  };
  const leaf = (name: string, caName: string, ext: string) => {
    writeFileSync(join(dir, `${name}.ext`), ext);
    run([
      'req',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:P-256',
      '-nodes',
      '-keyout',
      `${name}.key`,
      '-out',
      `${name}.csr`,
      '-subj',
      `/CN=${name}`,
    ]);
    run([
      'x509',
      '-req',
      '-in',
      `${name}.csr`,
      '-CA',
      `${caName}.pem`,
      '-CAkey',
      `${caName}.key`,
      '-CAcreateserial',
      '-out',
      `${name}.pem`,
      '-days',
      '2',
      '-extfile',
      `${name}.ext`,
    ]);
  };
  const read = (f: string) => readFileSync(join(dir, f), 'utf8');
  return { ca, leaf, read, path: (f: string) => join(dir, f) };
}

export interface Signer {
  url: (path: string) => string;
  seen: { path: string; body: any }[];
  close(): Promise<void>;
}

/** The customer's signing service: mutual TLS (clients must chain to `clientCa`), one mode per path. */
export async function startSigner(
  key: string,
  cert: string,
  clientCa: string,
  keys: Record<string, KeyObject>,
): Promise<Signer> {
  const seen: Signer['seen'] = [];
  const server: Server = createServer(
    { key, cert, ca: clientCa, requestCert: true, rejectUnauthorized: true },
    (req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        const path = req.url ?? '/';
        const body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
        seen.push({ path, body });
        const msg = Buffer.from(body.event_hash, 'utf8');
        if (path === '/hang') return; // never answers
        if (path === '/garbage') return void res.end('{"signature": "not base64!!"}');
        const signature =
          path === '/ed'
            ? sign(null, msg, keys.ed!)
            : sign('sha256', msg, { key: keys.rsa!, padding: constants.RSA_PKCS1_PSS_PADDING, saltLength: 32 });
        res.setHeader('content-type', 'application/json');
        res.end(JSON.stringify({ signature: signature.toString('base64') }));
      });
    },
  );
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as AddressInfo).port;
  return {
    url: (p) => `https://127.0.0.1:${port}${p}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
