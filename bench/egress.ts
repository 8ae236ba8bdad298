// npm run bench:egress — added latency of the sealed egress proxy per HTTPS
// request (kept-alive and new connection) against a direct connection in
// the same run, and requests/s through one capsule's proxy.
// Layout: the main thread runs only the proxy; a worker thread runs the
// upstream HTTPS server and all clients, so proxy work is not charged to the
// clients' event loop. Loopback only. Prints figures; asserts nothing.
import { generateKeyPairSync } from 'node:crypto';
import { request as httpRequest } from 'node:http';
import { Agent as HttpsAgent, createServer, request as httpsRequest } from 'node:https';
import type { AddressInfo } from 'node:net';
import { connect as tlsConnect, type TLSSocket } from 'node:tls';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';
import forge from 'node-forge';
import { startEgressProxy } from '../egress-proxy/index.js';

const HOST = 'bench.egress.test';
const N_KEEPALIVE = Number(process.env.BENCH_N ?? 2000);
const N_NEWCONN = Number(process.env.BENCH_N_NEW ?? 200);
const THROUGHPUT_MS = Number(process.env.BENCH_MS ?? 5000);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 32);

function upstreamPki() {
  const gen = () => {
    const kp = generateKeyPairSync('rsa', {
      modulusLength: 2048,
      publicKeyEncoding: { type: 'spki', format: 'pem' },
      privateKeyEncoding: { type: 'pkcs8', format: 'pem' },
    });
    return {
      pub: forge.pki.publicKeyFromPem(kp.publicKey),
      priv: forge.pki.privateKeyFromPem(kp.privateKey) as forge.pki.rsa.PrivateKey,
      pem: kp.privateKey,
    };
  };
  const mk = (cn: string, pub: forge.pki.PublicKey, signer: forge.pki.rsa.PrivateKey, issuer: string, ca: boolean) => {
    const c = forge.pki.createCertificate();
    c.publicKey = pub;
    c.serialNumber = ca ? '01' : '02';
    c.validity.notBefore = new Date(Date.now() - 3600_000);
    c.validity.notAfter = new Date(Date.now() + 86400_000);
    c.setSubject([{ name: 'commonName', value: cn }]);
    c.setIssuer([{ name: 'commonName', value: issuer }]);
    c.setExtensions(
      ca
        ? [
            { name: 'basicConstraints', cA: true },
            { name: 'keyUsage', keyCertSign: true },
          ]
        : [
            { name: 'subjectAltName', altNames: [{ type: 2, value: HOST }] },
            { name: 'extKeyUsage', serverAuth: true },
          ],
    );
    c.sign(signer, forge.md.sha256.create());
    return forge.pki.certificateToPem(c);
  };
  const ca = gen();
  const srv = gen();
  return {
    caPem: mk('bench CA', ca.pub, ca.priv, 'bench CA', true),
    key: srv.pem,
    cert: mk(HOST, srv.pub, ca.priv, 'bench CA', false),
  };
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))] ?? NaN;
};

/** One GET, resolves with elapsed ms. */
function get(agent: HttpsAgent, port: number): Promise<number> {
  const t0 = performance.now();
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      { host: '127.0.0.1', servername: HOST, port, path: '/small', agent, headers: { host: `${HOST}:${port}` } },
      (res) => {
        res.resume();
        res.on('end', () => resolve(performance.now() - t0));
      },
    );
    req.on('error', reject);
    req.end();
  });
}

/** An agent whose connections are CONNECT tunnels through the proxy, TLS to the capsule CA's leaf. */
function tunnelAgent(proxyPort: number, capsuleCa: string, keepAlive: boolean): HttpsAgent {
  const agent = new HttpsAgent({ keepAlive, maxSockets: 256 });
  const createConnection = (options: { port?: number | null }, cb: (err: Error | null, s?: TLSSocket) => void) => {
    const req = httpRequest({ host: '127.0.0.1', port: proxyPort, method: 'CONNECT', path: `${HOST}:${options.port}` });
    req.on('connect', (res, socket) => {
      if (res.statusCode !== 200) {
        cb(new Error(`CONNECT ${res.statusCode}`));
        return;
      }
      const tls = tlsConnect({ socket, servername: HOST, ca: capsuleCa }, () => cb(null, tls));
      tls.on('error', (e) => cb(e));
    });
    req.on('error', (e) => cb(e));
    req.end();
    return undefined;
  };
  return Object.assign(agent, { createConnection }) as HttpsAgent;
}

async function sequential(agent: HttpsAgent, port: number, n: number) {
  for (let i = 0; i < 50 && i < n; i++) await get(agent, port); // warm-up
  const xs: number[] = [];
  for (let i = 0; i < n; i++) xs.push(await get(agent, port));
  return { p50: pct(xs, 50), p99: pct(xs, 99) };
}

async function throughput(agent: HttpsAgent, port: number) {
  let count = 0;
  const end = performance.now() + THROUGHPUT_MS;
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (performance.now() < end) {
        await get(agent, port);
        count++;
      }
    }),
  );
  return count / (THROUGHPUT_MS / 1000);
}

async function workerMain() {
  const pki = upstreamPki();
  const body = Buffer.from(JSON.stringify({ ok: true, data: 'x'.repeat(200) }));
  const srv = createServer({ key: pki.key, cert: pki.cert }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json', 'content-length': body.length });
    res.end(body);
  });
  srv.keepAliveTimeout = 60_000;
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as AddressInfo).port;
  parentPort!.postMessage({ kind: 'upstream', port, caPem: pki.caPem });
  const { proxyPort, capsuleCa } = await new Promise<{ proxyPort: number; capsuleCa: string }>((r) =>
    parentPort!.once('message', r),
  );

  const directKA = new HttpsAgent({ keepAlive: true, ca: pki.caPem, maxSockets: 256 });
  const directNew = new HttpsAgent({ keepAlive: false, ca: pki.caPem });
  const proxKA = tunnelAgent(proxyPort, capsuleCa, true);
  const proxNew = tunnelAgent(proxyPort, capsuleCa, false);
  const out = {
    keepalive: {
      direct: await sequential(directKA, port, N_KEEPALIVE),
      proxied: await sequential(proxKA, port, N_KEEPALIVE),
    },
    newconn: {
      direct: await sequential(directNew, port, N_NEWCONN),
      proxied: await sequential(proxNew, port, N_NEWCONN),
    },
    rps: {
      direct: await throughput(directKA, port),
      proxied: await (async () => {
        parentPort!.postMessage({ kind: 'elu-start' });
        const r = await throughput(proxKA, port);
        parentPort!.postMessage({ kind: 'elu-end' });
        return r;
      })(),
    },
  };
  for (const a of [directKA, directNew, proxKA, proxNew]) a.destroy();
  srv.close();
  parentPort!.postMessage({ kind: 'result', out });
}

async function main() {
  const worker = new Worker(new URL(import.meta.url), { workerData: { bench: true } });
  const up = await new Promise<{ port: number; caPem: string }>((r) => worker.once('message', r));
  let events = 0;
  const proxy = await startEgressProxy({
    capsuleId: 'cap_bench',
    tcp: { host: '127.0.0.1', port: 0 },
    profileRules: [
      { kind: 'domain', value: HOST, port: up.port },
      { kind: 'ip_v4', value: '127.0.0.1', port: up.port },
    ],
    declaration: [HOST, '127.0.0.1'],
    extraCaPem: up.caPem,
    resolver: async () => [{ address: '127.0.0.1', family: 4 }],
    onEvent: () => {
      events++;
    },
  });
  worker.postMessage({ proxyPort: proxy.tcpAddress!.port, capsuleCa: proxy.caPem });
  let elu0 = performance.eventLoopUtilization();
  let proxyElu = NaN;
  worker.on('message', (m) => {
    if (m.kind === 'elu-start') elu0 = performance.eventLoopUtilization();
    if (m.kind === 'elu-end') proxyElu = performance.eventLoopUtilization(elu0).utilization;
  });
  const { out } = await new Promise<{
    out: {
      keepalive: Record<'direct' | 'proxied', { p50: number; p99: number }>;
      newconn: Record<'direct' | 'proxied', { p50: number; p99: number }>;
      rps: Record<'direct' | 'proxied', number>;
    };
  }>((r) =>
    worker.on('message', (m) => {
      if (m.kind === 'result') r(m);
    }),
  );
  await proxy.stop();
  await worker.terminate();
  const f = (x: number) => x.toFixed(3);
  console.log(`sealed egress benchmark (node ${process.version}, ${new Date().toISOString()})`);
  console.log(
    `  kept-alive HTTPS, ${N_KEEPALIVE} sequential GETs: direct p50 ${f(out.keepalive.direct.p50)} ms p99 ${f(out.keepalive.direct.p99)} ms | proxied p50 ${f(out.keepalive.proxied.p50)} ms p99 ${f(out.keepalive.proxied.p99)} ms | added p50 ${f(out.keepalive.proxied.p50 - out.keepalive.direct.p50)} ms (target <= 2 ms)`,
  );
  console.log(
    `  new connection per GET, ${N_NEWCONN} sequential:   direct p50 ${f(out.newconn.direct.p50)} ms p99 ${f(out.newconn.direct.p99)} ms | proxied p50 ${f(out.newconn.proxied.p50)} ms p99 ${f(out.newconn.proxied.p99)} ms | added p50 ${f(out.newconn.proxied.p50 - out.newconn.direct.p50)} ms`,
  );
  console.log(
    `  throughput, ${CONCURRENCY} concurrent kept-alive clients, ${THROUGHPUT_MS} ms: direct ${out.rps.direct.toFixed(0)} req/s | through one proxy ${out.rps.proxied.toFixed(0)} req/s (target >= 1000)`,
  );
  console.log(
    `  proxy thread event-loop utilization during the proxied throughput run: ${(proxyElu * 100).toFixed(0)}% (below 100% = the proxy was not the bottleneck)`,
  );
  console.log(`  activity events recorded: ${events}`);
}

if (isMainThread) await main();
else if (workerData?.bench) await workerMain();
