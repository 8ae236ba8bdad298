// A hostile host against the HTTP listener: thousands of silent (half-open)
// connections, slowloris heads and stalled bodies from one address, while a
// client on another address runs capsule lifecycles. 127.0.0.0/8 all routes
// to lo, so 127.0.0.2 and 127.0.0.3 are "other hosts" here.
import t from 'tap';
import { spawn } from 'node:child_process';
import { connect, type Socket } from 'node:net';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, start, type Api } from './harness.js';

const CAP = 64;
const HEADERS_TIMEOUT_MS = 1500;
const BODY_IDLE_MS = 1000;
const FLOOD = 3000;

interface Conn {
  socket: Socket;
  data: string;
  closed: Promise<void>;
}

function open(port: number, localAddress: string): Promise<Conn> {
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port, localAddress });
    const c: Conn = {
      socket,
      data: '',
      closed: new Promise<void>((r) => socket.once('close', () => r())),
    };
    socket.on('data', (b: Buffer) => (c.data += b.toString()));
    socket.on('error', () => undefined);
    socket.once('connect', () => resolve(c));
    socket.once('error', reject);
  });
}

async function openMany(port: number, localAddress: string, n: number): Promise<Conn[]> {
  const out: Conn[] = [];
  for (let i = 0; i < n; i += 250) {
    out.push(...(await Promise.all(Array.from({ length: Math.min(250, n - i) }, () => open(port, localAddress)))));
  }
  return out;
}

async function lifecycle(api: Api, key: string): Promise<number> {
  const t0 = performance.now();
  const c = await api.req('POST', '/v1/capsules', { key, json: {} });
  if (c.status !== 201) throw new Error(`create ${c.status} ${c.text}`);
  const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command: 'echo hi' } });
  if (ex.status !== 200 || ex.body.stdout !== 'hi\n') throw new Error(`exec ${ex.status} ${ex.text}`);
  const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
  if (d.status !== 200) throw new Error(`destroy ${d.status} ${d.text}`);
  return performance.now() - t0;
}

/**
 * A child process that opens `n` silent connections from `localAddress`,
 * then, on request, reports how each ended (first status line, or still open).
 */
function spawnFlood(port: number, localAddress: string, n: number) {
  const code = `
    import { connect } from 'node:net';
    const conns = [];
    let connected = 0;
    for (let i = 0; i < ${n}; i++) {
      const c = { data: '', closed: false };
      const s = connect({ host: '127.0.0.1', port: ${port}, localAddress: '${localAddress}' });
      s.on('data', (b) => (c.data += b));
      s.on('error', () => {});
      s.on('close', () => (c.closed = true));
      s.once('connect', () => { if (++connected === ${n}) process.stdout.write('connected\\n'); });
      conns.push(c);
    }
    process.stdin.once('data', async (line) => {
      const deadline = Date.now() + Number(line);
      while (Date.now() < deadline && conns.some((c) => !c.closed)) await new Promise((r) => setTimeout(r, 50));
      const r = { connected, open: 0, '429': 0, '408': 0, other: 0, sample429: '' };
      for (const c of conns) {
        if (!c.closed) r.open++;
        else if (c.data.startsWith('HTTP/1.1 429')) { r['429']++; r.sample429 ||= c.data; }
        else if (c.data.startsWith('HTTP/1.1 408')) r['408']++;
        else r.other++;
      }
      process.stdout.write(JSON.stringify(r) + '\\n');
      process.exit(0);
    });`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', code], { stdio: ['pipe', 'pipe', 'inherit'] });
  let out = '';
  const lines: ((l: string) => void)[] = [];
  child.stdout.on('data', (b: Buffer) => {
    out += b.toString();
    let i;
    while ((i = out.indexOf('\n')) >= 0) {
      const l = out.slice(0, i);
      out = out.slice(i + 1);
      lines.shift()?.(l);
    }
  });
  const next = (): Promise<string> => new Promise((r) => lines.push(r));
  const connected = next();
  return {
    child,
    connected,
    async report(waitMs: number): Promise<Record<string, any>> {
      const r = next();
      child.stdin.write(`${waitMs}\n`);
      return JSON.parse(await r);
    },
  };
}

const median = (xs: number[]): number => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
const within = <T>(p: Promise<T>, ms: number): Promise<T | 'timeout'> =>
  Promise.race([p, new Promise<'timeout'>((r) => setTimeout(() => r('timeout'), ms))]);

for (const driver of DRIVERS) {
  t.test(`${driver}: one host's connection flood does not refuse another's lifecycle`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, {
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_HTTP_MAX_CONNECTIONS_PER_IP: String(CAP),
      CAPSULE_HTTP_HEADERS_TIMEOUT_MS: String(HEADERS_TIMEOUT_MS),
      CAPSULE_HTTP_BODY_IDLE_TIMEOUT_MS: String(BODY_IDLE_MS),
    });
    t.teardown(s.close);
    const port = s.cp.port;
    const victim = await s.api.signup();
    await lifecycle(s.api, victim.key); // warm-up
    const base: number[] = [];
    for (let i = 0; i < 3; i++) base.push(await lifecycle(s.api, victim.key));

    await t.test(`${FLOOD} silent connections from 127.0.0.2`, async (t) => {
      // The attacker is its own process, so its sockets cost the server, not the test's event loop.
      const flood = spawnFlood(port, '127.0.0.2', FLOOD);
      t.teardown(() => flood.child.kill('SIGKILL'));
      let maxOpen = 0;
      const poll = setInterval(() => (maxOpen = Math.max(maxOpen, s.cp.connections.open('127.0.0.2'))), 5);
      t.teardown(() => clearInterval(poll));
      await flood.connected;
      // While the server works through the burst (an attacker on this host also takes CPU): the lifecycle works.
      const burst = await lifecycle(s.api, victim.key);
      t.pass(`lifecycle during the connection burst: ${burst.toFixed(0)} ms`);
      // Once the burst is refused, with the flood's sockets still held open: normal latency.
      for (let last = -1; s.cp.connections.refused() !== last;) {
        last = s.cp.connections.refused();
        await new Promise((r) => setTimeout(r, 200));
      }
      const during: number[] = [];
      for (let i = 0; i < 3; i++) during.push(await lifecycle(s.api, victim.key));
      const b = median(base);
      const m = median(during);
      t.ok(
        m <= Math.max(2 * b, b + 250),
        `lifecycle p50 ${m.toFixed(0)} ms with the flood held (baseline ${b.toFixed(0)} ms)`,
      );

      // Refused connections get one 429 envelope and are closed; nothing they send is parsed. The
      // accepted silent ones are closed by the head timeout (408), so a flood cannot keep its slots.
      const report = await flood.report(HEADERS_TIMEOUT_MS + 5000);
      clearInterval(poll);
      t.ok(maxOpen <= CAP, `at most ${CAP} held open at any time (seen ${maxOpen})`);
      t.equal(report.connected, FLOOD, 'every connection was established');
      t.same(
        { open: report.open, other: report.other, total: report['429'] + report['408'] },
        { open: 0, other: 0, total: FLOOD },
        `the server answered and closed every one: ${report['429']} with 429 at once, ${report['408']} with 408 at the head timeout`,
      );
      t.match(report.sample429, /\r\nRetry-After: 1\r\n/);
      t.match(report.sample429, /\r\nConnection: close\r\n/);
      const env = JSON.parse(report.sample429.slice(report.sample429.indexOf('\r\n\r\n') + 4)).error;
      t.equal(env.code, 'rate_limited');
      t.match(env.doc_url, /\/docs\/errors\/rate_limited$/);
      t.match(env.request_id, /^req_[0-9a-f]{24}$/);
      t.equal(s.cp.connections.open('127.0.0.2'), 0, 'no slot left held');
    });

    await t.test('a refused connection cannot smuggle a request in', async (t) => {
      const hold = await openMany(port, '127.0.0.4', CAP);
      t.teardown(() => hold.forEach((c) => c.socket.destroy()));
      const extra = await open(port, '127.0.0.4');
      const before = (await s.api.req('GET', '/v1/customers/me', { key: victim.key })).body.usage
        .capsules_used_this_month;
      extra.socket.write(
        `POST /v1/capsules HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${victim.key}\r\n` +
          `Content-Type: application/json\r\nContent-Length: 2\r\n\r\n{}`,
      );
      await within(extra.closed, 3000);
      t.match(extra.data, /^HTTP\/1\.1 429 /);
      t.notMatch(extra.data, /HTTP\/1\.1 201/);
      const after = (await s.api.req('GET', '/v1/customers/me', { key: victim.key })).body.usage
        .capsules_used_this_month;
      t.equal(after, before, 'no capsule was created through the refused connection');
      // Each refusal has a request id of its own, in the form of every other request id.
      const again = await open(port, '127.0.0.4');
      await within(again.closed, 3000);
      const ids = [extra.data, again.data].map((d) => JSON.parse(d.slice(d.indexOf('\r\n\r\n') + 4)).error.request_id);
      t.match(ids[0], /^req_[0-9a-f]{24}$/);
      t.match(ids[1], /^req_[0-9a-f]{24}$/);
      t.not(ids[0], ids[1]);
    });

    await t.test('slowloris heads from 127.0.0.3 are cut at the head timeout', async (t) => {
      const slow = await openMany(port, '127.0.0.3', 40);
      const started = performance.now();
      for (const c of slow) c.socket.write('GET /v1/health HTTP/1.1\r\nHost: x\r\n');
      // One header byte every 200 ms: never a complete head.
      const drip = setInterval(() => slow.forEach((c) => c.socket.writable && c.socket.write('X')), 200);
      t.teardown(() => clearInterval(drip));
      const ended = await within(Promise.all(slow.map((c) => c.closed)), HEADERS_TIMEOUT_MS + 3000);
      clearInterval(drip);
      t.not(ended, 'timeout', 'every slowloris connection was closed');
      t.ok(performance.now() - started >= HEADERS_TIMEOUT_MS - 100, 'not before the head timeout');
      t.match(slow[0]!.data, /^HTTP\/1\.1 408 /, 'answered 408 Request Timeout');
      t.equal((await lifecycle(s.api, victim.key)) > 0, true, 'the victim still runs lifecycles');
    });

    await t.test('a stalled body gets 400 naming body after the idle timeout, and the connection closes', async (t) => {
      const c = await open(port, '127.0.0.3');
      const started = performance.now();
      c.socket.write(
        'POST /v1/signup HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"em',
      );
      const r = await within(c.closed, BODY_IDLE_MS + 3000);
      t.not(r, 'timeout', 'connection closed');
      const took = performance.now() - started;
      t.ok(took >= BODY_IDLE_MS - 100, `after the idle timeout (${took.toFixed(0)} ms)`);
      t.match(c.data, /^HTTP\/1\.1 400 /);
      t.match(c.data, /connection: close/i);
      const env = JSON.parse(c.data.slice(c.data.indexOf('\r\n\r\n') + 4)).error;
      t.equal(env.code, 'invalid_parameters');
      t.equal(env.field, 'body');
      t.match(env.message, /^body: no data received/);
    });

    await t.test('a head over the size bound is refused', async (t) => {
      const big = await s.api.req('GET', '/v1/health', { headers: { 'x-pad': 'a'.repeat(20_000) } }).catch(() => null);
      t.equal(big?.status ?? 431, 431, 'a head over 16 KiB is refused (431)');
      const r = await s.api.req('GET', '/v1/health');
      t.equal(r.status, 200);
    });
  });
}
