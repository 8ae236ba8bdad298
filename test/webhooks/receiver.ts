// A real HTTPS webhook receiver on loopback (certificate from a test CA the
// control plane trusts through CAPSULE_WEBHOOK_EXTRA_CA). It verifies every
// delivery's signature with code written from the contract alone (node:crypto,
// not the project's shared/webhook-signature.ts):
//   Svc-Webhook-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256(secret, t + "." + raw body)>
import { createHmac, timingSafeEqual } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makePki } from '../egress/fixtures.js';

export interface Received {
  path: string;
  id: string;
  signature: string;
  /** The signature checked against the endpoint secret registered for the path (null: no secret known). */
  verified: boolean | null;
  body: any;
  raw: string;
  at: number;
}

/** Mode per path: a status to answer, 'hang' (never answer), 'redirect' (302 to /ok), or a delay then a status. */
export type Mode = number | 'hang' | 'redirect' | { delayMs: number; status: number };

/** The receiver's check, from the contract: t within 300 s of now, v1 equals HMAC-SHA256(secret, `${t}.${body}`). */
export function verifyFromContract(header: string, secret: string, raw: string, nowS: number): boolean {
  const parts = Object.fromEntries(
    header.split(',').map((p) => {
      const i = p.indexOf('=');
      return [p.slice(0, i), p.slice(i + 1)];
    }),
  );
  const t = Number(parts.t);
  if (!Number.isInteger(t) || Math.abs(nowS - t) > 300 || typeof parts.v1 !== 'string') return false;
  const expected = createHmac('sha256', secret).update(`${t}.${raw}`).digest();
  const got = Buffer.from(parts.v1, 'hex');
  return got.length === expected.length && timingSafeEqual(got, expected);
}

export interface Receiver {
  base: string;
  port: number;
  caFile: string;
  received: Received[];
  /** TLS connections accepted so far. */
  connections: number;
  modes: Map<string, Mode>;
  /** Endpoint secrets per path, for signature checks. */
  secrets: Map<string, string>;
  /** Clock of the signature check (unix seconds); default: the wall clock. */
  nowS: () => number;
  waitFor(pred: (r: Received[]) => boolean, ms?: number): Promise<void>;
  close(): Promise<void>;
}

export async function startReceiver(): Promise<Receiver> {
  const pki = makePki(['receiver.test', 'localhost', '127.0.0.1']);
  const dir = mkdtempSync(join(tmpdir(), 'wh-ca-'));
  const caFile = join(dir, 'ca.pem');
  writeFileSync(caFile, pki.caPem);
  const received: Received[] = [];
  const modes = new Map<string, Mode>();
  const secrets = new Map<string, string>();
  const hanging = new Set<() => void>();
  const rx: Receiver = {
    base: '',
    port: 0,
    caFile,
    received,
    connections: 0,
    modes,
    secrets,
    nowS: () => Math.floor(Date.now() / 1000),
    async waitFor(pred, ms = 10_000) {
      const end = Date.now() + ms;
      while (!pred(received)) {
        if (Date.now() > end) throw new Error(`receiver: condition not met in ${ms} ms (${received.length} received)`);
        await new Promise((r) => setTimeout(r, 10));
      }
    },
    close: async () => {
      for (const h of hanging) h();
      server.closeAllConnections();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
  const server: Server = createServer({ key: pki.serverKey, cert: pki.serverCert }, (req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const raw = Buffer.concat(chunks).toString('utf8');
      const path = req.url ?? '/';
      const signature = String(req.headers['svc-webhook-signature'] ?? '');
      const secret = secrets.get(path);
      let body: unknown = null;
      try {
        body = JSON.parse(raw);
      } catch {
        /* kept raw */
      }
      received.push({
        path,
        id: String(req.headers['svc-webhook-id'] ?? ''),
        signature,
        verified: secret === undefined ? null : verifyFromContract(signature, secret, raw, rx.nowS()),
        body,
        raw,
        at: Date.now(),
      });
      const mode = modes.get(path) ?? 200;
      if (mode === 'hang') {
        const end = (): void => void res.destroy();
        hanging.add(end);
        return;
      }
      if (mode === 'redirect') {
        res.writeHead(302, { location: '/ok' }).end();
        return;
      }
      if (typeof mode === 'object') {
        setTimeout(() => res.writeHead(mode.status).end('{"slow":true}'), mode.delayMs);
        return;
      }
      res
        .writeHead(mode, { 'content-type': 'text/plain' })
        .end(mode >= 300 ? `failing with ${mode} ${'x'.repeat(3000)}` : 'ok');
    });
  });
  server.on('secureConnection', () => rx.connections++);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  rx.port = (server.address() as AddressInfo).port;
  rx.base = `https://127.0.0.1:${rx.port}`;
  return rx;
}
