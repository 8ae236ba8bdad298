// Sealed egress: the capsule's only path out is the relay to its proxy
// socket; proxy env and CA bundle are in place; nothing else is reachable.
import t from 'tap';
import { existsSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startRunner } from '../helpers/runner.js';

const CA = '-----BEGIN CERTIFICATE-----\nTUlJQ0FQU1VMRVRFU1RDQQ==\n-----END CERTIFICATE-----';

t.test('egress through the relay only', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capsule-proxy-'));
  const sock = join(dir, 'proxy.sock');
  const seen: string[] = [];
  // A stand-in for the per-capsule egress proxy: answers every request itself.
  const proxy = createServer((s) => {
    s.once('data', (b) => {
      seen.push(b.toString().split('\r\n')[0] ?? '');
      s.end('HTTP/1.1 200 OK\r\nContent-Length: 7\r\nConnection: close\r\n\r\nPROXIED');
    });
  });
  await new Promise<void>((r) => proxy.listen(sock, r));
  t.teardown(() => {
    proxy.close();
    rmSync(dir, { recursive: true, force: true });
  });
  const r = await startRunner();
  t.teardown(() => r.stop());
  const c = r.client;

  await t.rejects(
    c.create({ capsule_id: 'e0', memory_mb: 64, egress: { proxy_socket: join(dir, 'nope.sock'), ca_pem: CA } }),
    { code: 'invalid', message: /egress\.proxy_socket/ },
  );
  await t.rejects(c.create({ capsule_id: 'e0', memory_mb: 64, egress: { proxy_socket: sock, ca_pem: 'x' } }), {
    code: 'invalid',
    message: /egress\.ca_pem/,
  });

  await c.create({ capsule_id: 'eg', memory_mb: 128, egress: { proxy_socket: sock, ca_pem: CA } });
  const res = await c.exec({
    capsule_id: 'eg',
    command:
      'curl -s -m 5 http://example.com/hello; echo; echo "$HTTPS_PROXY $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $REQUESTS_CA_BUNDLE"; tail -c 80 /etc/capsule-ca.pem | grep -c "END CERTIFICATE"; curl -s -m 3 --noproxy "*" http://1.1.1.1/ || echo direct-failed; /usr/sbin/ip link set lo down 2>/dev/null || echo link-refused; curl -s -m 5 http://example.com/again >/dev/null && echo still-up; ls /sys/class/net 2>/dev/null; cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d " "',
    timeout_ms: 20000,
  });
  t.match(res.stdout, /^PROXIED\n/, `through the proxy: ${res.stdout} ${res.stderr}`);
  t.equal(seen[0], 'GET http://example.com/hello HTTP/1.1', 'the proxy saw the request');
  t.match(
    res.stdout,
    /http:\/\/127\.0\.0\.1:3128 \/etc\/capsule-ca\.pem \/etc\/capsule-ca\.pem \/etc\/capsule-ca\.pem/,
  );
  t.match(res.stdout, /direct-failed/, 'no direct path out');
  t.match(res.stdout, /link-refused\nstill-up/, 'the capsule cannot change its links');
  t.equal(seen.length, 2);
  t.match(res.stdout, /\nlo\n$/, 'loopback is the only interface');

  const d = await c.destroy('eg');
  const life = d.evidence[7] as Record<string, unknown>;
  t.equal(life['egress_relay_stopped'], true);
  t.equal(life['egress_netns_removed'], true);
  const ours = readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p))
    .filter((p) => {
      try {
        return readlinkSync(`/proc/${p}/exe`).endsWith('socat') && readFileSafe(`/proc/${p}/cmdline`).includes(sock);
      } catch {
        return false;
      }
    });
  t.same(ours, [], 'no relay left');
  t.notOk(existsSync('/run/netns/eg'));
});

function readFileSafe(p: string): string {
  try {
    return readFileSync(p, 'utf8');
  } catch {
    return '';
  }
}
