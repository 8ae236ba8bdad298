// The seccomp workload corpus: what customers actually run (sh + coreutils,
// python3, node, curl/python/node HTTPS through the sealed egress relay),
// each with the exact output it must print. Shared by the corpus test and
// scripts/seccomp-measure.mjs, which uses it to choose the allowlist.
import { readFileSync } from 'node:fs';
import { createServer as createHttpsServer } from 'node:https';
import { connect, createServer, type AddressInfo } from 'node:net';
import { fileURLToPath } from 'node:url';
import type { RunnerPort } from '../../../shared/runner-protocol.js';
import { makePki, tempDir } from '../../egress/fixtures.js';

const SRC = (f: string): string =>
  readFileSync(fileURLToPath(new URL(`../../../../test/runner/workloads/${f}`, import.meta.url)), 'utf8');

export interface Workload {
  name: string;
  /** 'egress' workloads run in a capsule whose only way out is the relay. */
  capsule: 'plain' | 'egress';
  command: string;
  input?: string;
  input_filename?: string;
  expect: string;
  /** Expected stderr; default empty (a tool complaining about a refused call fails the workload). */
  expectStderr?: string | RegExp;
}

export const SH_EXPECT = `hello world
../f1
hello world
f4 link 
-rw-r--r--
a b c 
4
2
hello capsule
world 5
c
b
hello world
4
db3974a97f2407b7
w/a/b/f4 w/a/f1 w/a/f2 w/list w/list.gz 
date-ok
1
child killed: 143
pid-ok
w/a
sub-shell
-rw-------
2020
removed
SH-OK
`;

export const PY_EXPECT = `json 6
csv ['1', '2']
subprocess 42
subprocess-pipe a
threads 14
multiprocessing 285
process from-child
sqlite (3, 'a,b,c')
fsync 2
pid True True
chmod-link-copy 0o700 final2 v
rename v2 ['a.json', 'final2', 'ln', 't.csv', 'x.db']
tempfile temp
hashlib ba7816bf8f01cfea ddaf35a1
zipfile ['in.txt'] 700
socket PING
ssl True OpenSSL
PY-OK
`;

export const NODE_EXPECT = `fs one two b.txt,e.txt,ln,sub 3
chmod-link-copy 700 b.txt o
fs-rm false
fsync 5
process true true true
crypto ba7816bf8f01cfea 16
sign true
scrypt 16
child_process 42
spawn 0 a,b
worker 42
http 200 hi GET /x
zlib 400 true
NODE-OK
`;

/** The HTTPS workloads, for an upstream reachable as api.test:<port> through the relay. */
function egressWorkloads(port: number): Workload[] {
  const url = `https://api.test:${port}/hello`;
  return [
    { name: 'curl https via relay', capsule: 'egress', command: `curl -sS -m 20 ${url}`, expect: 'HELLO-TLS /hello' },
    {
      name: 'python https via relay',
      capsule: 'egress',
      command: 'python3 /tmp/e.py',
      input_filename: '/tmp/e.py',
      input: `import urllib.request\nprint(urllib.request.urlopen("${url}", timeout=20).read().decode())\n`,
      expect: 'HELLO-TLS /hello\n',
    },
    {
      // Node 20 in the image has no env-proxy support: CONNECT by hand, CA via NODE_EXTRA_CA_CERTS.
      name: 'node https via relay',
      capsule: 'egress',
      command: 'node /tmp/e.cjs',
      input_filename: '/tmp/e.cjs',
      input: `const http = require('http'), tls = require('tls');
const c = http.request({ host: '127.0.0.1', port: 3128, method: 'CONNECT', path: 'api.test:${port}' });
c.on('connect', (res, sock) => {
  const s = tls.connect({ socket: sock, servername: 'api.test' }, () => {
    http.get({ host: 'api.test', path: '/hello', createConnection: () => s }, (r) => { let b = ''; r.on('data', (d) => b += d); r.on('end', () => { console.log(b); s.end(); }); });
  });
  s.on('error', (e) => { console.log('tls', e.code || e.message); process.exit(4); });
});
c.on('error', (e) => { console.log('proxy', e.message); process.exit(5); });
c.end();
`,
      expect: 'HELLO-TLS /hello\n',
    },
  ];
}

export function corpus(httpsPort: number): Workload[] {
  return [
    {
      name: 'sh + coreutils',
      capsule: 'plain',
      command: 'sh /tmp/corpus.sh',
      input_filename: '/tmp/corpus.sh',
      input: SRC('corpus.sh'),
      expect: SH_EXPECT,
      expectStderr: /^(Terminated\n)?$/,
    },
    {
      name: 'python3',
      capsule: 'plain',
      command: 'cd /tmp && python3 /tmp/corpus.py',
      input_filename: '/tmp/corpus.py',
      input: SRC('corpus.py'),
      expect: PY_EXPECT,
    },
    {
      name: 'node',
      capsule: 'plain',
      command: 'node /tmp/corpus.cjs',
      input_filename: '/tmp/corpus.cjs',
      input: SRC('corpus.cjs'),
      expect: NODE_EXPECT,
    },
    ...egressWorkloads(httpsPort),
  ];
}

/** A CONNECT proxy on a Unix socket (stand-in for the egress proxy) tunnelling to a local HTTPS server for api.test. */
export async function startEgressFixture(): Promise<{
  proxySocket: string;
  caPem: string;
  httpsPort: number;
  close(): void;
}> {
  const pki = makePki(['api.test']);
  const https = createHttpsServer({ key: pki.serverKey, cert: pki.serverCert }, (req, res) =>
    res.end(`HELLO-TLS ${req.url}`),
  );
  await new Promise<void>((r) => https.listen(0, '127.0.0.1', r));
  const httpsPort = (https.address() as AddressInfo).port;
  const dir = tempDir('seccomp-corpus-');
  const proxySocket = `${dir.dir}/proxy.sock`;
  const proxy = createServer((s) => {
    s.once('data', (b) => {
      const m = /^CONNECT api\.test:(\d+) /.exec(b.toString());
      if (!m || Number(m[1]) !== httpsPort) return void s.end('HTTP/1.1 403 Forbidden\r\n\r\n');
      const up = connect(httpsPort, '127.0.0.1', () => {
        s.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        s.pipe(up).pipe(s);
      });
      up.on('error', () => s.destroy());
      s.on('error', () => up.destroy());
    });
  });
  await new Promise<void>((r) => proxy.listen(proxySocket, r));
  return {
    proxySocket,
    caPem: pki.caPem,
    httpsPort,
    close() {
      proxy.close();
      https.close();
      dir.remove();
    },
  };
}

export interface WorkloadResult {
  name: string;
  ok: boolean;
  detail: string;
}

/** Runs every workload (plain and egress capsules side by side); never throws for a failing workload. */
export async function runCorpus(
  client: RunnerPort,
  ids: { plain: string; egress: string },
  httpsPort: number,
  timeoutMs = 60000,
): Promise<WorkloadResult[]> {
  const all = corpus(httpsPort);
  const one = async (w: Workload): Promise<WorkloadResult> => {
    try {
      const r = await client.exec({
        capsule_id: ids[w.capsule],
        command: w.command,
        timeout_ms: timeoutMs,
        ...(w.input !== undefined
          ? {
              input_b64: Buffer.from(w.input).toString('base64'),
              input_filename: w.input_filename ?? '/data/input/data',
            }
          : {}),
      });
      const ok =
        r.exit_code === 0 &&
        r.stdout === w.expect &&
        (w.expectStderr instanceof RegExp ? w.expectStderr.test(r.stderr) : r.stderr === (w.expectStderr ?? ''));
      return {
        name: w.name,
        ok,
        detail: ok
          ? ''
          : `exit ${r.exit_code}${r.timed_out ? ' (timeout)' : ''}\n--- stdout\n${r.stdout.slice(-1500)}\n--- stderr\n${r.stderr.slice(-1500)}`,
      };
    } catch (e) {
      return { name: w.name, ok: false, detail: String(e) };
    }
  };
  const seq = async (ws: Workload[]): Promise<WorkloadResult[]> => {
    const out: WorkloadResult[] = [];
    for (const w of ws) out.push(await one(w));
    return out;
  };
  const [a, b] = await Promise.all([
    seq(all.filter((w) => w.capsule === 'plain')),
    seq(all.filter((w) => w.capsule === 'egress')),
  ]);
  return [...a, ...b];
}
