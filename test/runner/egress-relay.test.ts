// The relay's readiness check looks at the capsule's own network namespace only.
// Before nsenter joins it, /proc/<pid>/net/tcp is the host's table: a host
// listener on the relay's port answered "listening" for a relay not yet
// started, and under a connection flood each look read megabytes on the exec
// thread every 2 ms (every tenant's exec waited behind it).
import t from 'tap';
import { readlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { RELAY_PORT, relayListening } from '../../sandbox-runner/egress.js';

t.test('a host listener on the relay port is not the relay', async (t) => {
  const server = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    server.once('error', () => resolve(false));
    server.listen(RELAY_PORT, '127.0.0.1', () => resolve(true));
  });
  t.ok(bound, `a host process listens on 127.0.0.1:${RELAY_PORT}`);
  t.teardown(() => server.close());
  const own = readlinkSync('/proc/self/ns/net');
  t.equal(relayListening(process.pid, own), true, 'in its namespace, a listener is seen');
  t.equal(relayListening(process.pid, 'net:[1]'), false, 'outside the capsule namespace: not the relay');
  t.equal(relayListening(process.pid, null), false, 'a namespace that is gone: not listening');
  server.close();
  await new Promise((r) => server.once('close', r));
  t.equal(relayListening(process.pid, own), false, 'nothing listens any more');
});
