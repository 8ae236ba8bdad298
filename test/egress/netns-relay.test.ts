// The capsule-side design of docs/EGRESS.md, exercised for real: a network
// namespace with loopback only, a socat relay on 127.0.0.1:3128 inside it
// forwarding to the proxy's Unix socket. From inside: the allowed host works
// through the proxy; a direct connection, DNS and UDP all fail.
// (The runner owns the production wiring; this proves the proxy side of it.)
import t from 'tap';
import { startEgressProxy, type EgressEvent } from '../../egress-proxy/index.js';
import { eventsOf, fakeResolver, makePki, run, startUpstreams, tempDir } from './fixtures.js';

const root = process.getuid?.() === 0;
const haveTools = (await run('sh', ['-c', 'command -v unshare && command -v socat && command -v ip'])).code === 0;

t.test(
  'capsule netns -> relay -> Unix socket -> proxy',
  { skip: !root || !haveTools ? 'needs root, unshare, socat, ip' : false },
  async (t) => {
    const pki = makePki(['api.egress.test']);
    const up = await startUpstreams(pki);
    const tmp = tempDir('egress-netns-');
    const events: EgressEvent[] = [];
    const proxy = await startEgressProxy({
      capsuleId: 'cap_netns',
      socketPath: `${tmp.dir}/proxy.sock`,
      profileRules: [
        { kind: 'domain', value: 'api.egress.test', port: up.ports.https },
        { kind: 'ip_v4', value: '127.0.0.1', port: up.ports.https },
      ],
      declaration: ['api.egress.test', '127.0.0.1'],
      extraCaPem: pki.caPem,
      resolver: fakeResolver({ 'api.egress.test': '127.0.0.1' }),
      onEvent: (e) => events.push(e),
    });
    const ca = tmp.write('ca.pem', proxy.caPem);
    t.teardown(async () => {
      await proxy.stop();
      await up.close();
      tmp.remove();
    });
    const script = `
set -u
ip link set lo up
socat TCP-LISTEN:3128,bind=127.0.0.1,fork,reuseaddr UNIX-CONNECT:${proxy.socketPath} &
RELAY=$!
for i in $(seq 1 100); do (exec 3<>/dev/tcp/127.0.0.1/3128) 2>/dev/null && break; sleep 0.05; done
echo "proxied=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --proxy http://127.0.0.1:3128 --cacert ${ca} https://api.egress.test:${up.ports.https}/json)"
curl -sS -o /dev/null --max-time 3 --cacert ${ca} https://127.0.0.1:${up.ports.https}/json 2>/dev/null; echo "direct_exit=$?"
getent hosts example.com >/dev/null 2>&1; echo "dns_exit=$?"
python3 -c "import socket; socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b'x', ('8.8.8.8', 53))" 2>/dev/null; echo "udp_exit=$?"
echo "refused=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 --proxy http://127.0.0.1:3128 https://example.com/ 2>&1 | grep -o 'CONNECT tunnel failed, response [0-9]*' | grep -o '[0-9]*$')"
kill $RELAY
`;
    const r = await run('unshare', ['--net', 'bash', '-c', script]);
    const out = Object.fromEntries(
      r.stdout
        .trim()
        .split('\n')
        .map((l) => l.split('=') as [string, string]),
    );
    t.equal(out.proxied, '200', `allowed host through the relay (${r.stderr})`);
    t.not(out.direct_exit, '0', 'direct connection from the capsule netns fails');
    t.not(out.dns_exit, '0', 'no DNS from inside');
    t.not(out.udp_exit, '0', 'no UDP from inside');
    t.equal(out.refused, '403', 'an unlisted host is refused by the proxy');
    t.equal(eventsOf(events, 'SealedHttpRequest').length, 1);
  },
);
