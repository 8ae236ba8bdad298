// The relay's readiness check looks at the capsule's own network namespace only,
// and only at its counters. Before nsenter joins it, /proc/<pid>/net/* is the
// host's: a host listener on the relay's port answered "listening" for a relay
// not yet started. And /proc/<pid>/net/tcp walks every connection of the node
// whatever the namespace: under a connection flood each look read megabytes on
// the exec thread every 2 ms (every tenant's exec waited behind it).
import t from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { statSync } from 'node:fs';
import { createServer } from 'node:net';
import { randomBytes } from 'node:crypto';
import { createInterface } from 'node:readline';
import { RELAY_PORT, relayListening } from '../../sandbox-runner/egress.js';

// Binds the relay's port, says so, listens on the next line of stdin, says so, waits.
const LISTENER = [
  'import socket, sys',
  's = socket.socket()',
  `s.bind(("127.0.0.1", ${RELAY_PORT}))`,
  'print("bound", flush=True)',
  'sys.stdin.readline()',
  's.listen(8)',
  'print("listening", flush=True)',
  'sys.stdin.readline()',
].join('\n');

t.test('only a listener in the capsule namespace is the relay', async (t) => {
  const host = createServer();
  const bound = await new Promise<boolean>((resolve) => {
    host.once('error', () => resolve(false));
    host.listen(RELAY_PORT, '127.0.0.1', () => resolve(true));
  });
  t.ok(bound, `a host process listens on 127.0.0.1:${RELAY_PORT}`);
  t.teardown(() => host.close());

  const name = `capsule-relay-test-${randomBytes(4).toString('hex')}`;
  t.equal(spawnSync('ip', ['netns', 'add', name]).status, 0, 'a new namespace');
  t.teardown(() => spawnSync('ip', ['netns', 'delete', name]));
  spawnSync('ip', ['-n', name, 'link', 'set', 'lo', 'up']);
  const id = `net:[${statSync(`/run/netns/${name}`).ino}]`;

  const child = spawn('nsenter', [`--net=/run/netns/${name}`, '--', 'python3', '-c', LISTENER], {
    stdio: ['pipe', 'pipe', 'inherit'],
  });
  t.teardown(() => child.kill('SIGKILL'));
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]();
  t.equal((await lines.next()).value, 'bound');

  t.equal(relayListening(process.pid, id), false, 'the host listener: outside the capsule namespace');
  t.equal(relayListening(child.pid!, id), false, 'bound but not listening yet');
  child.stdin!.write('\n');
  t.equal((await lines.next()).value, 'listening');
  t.equal(relayListening(child.pid!, id), true, 'listening in its namespace');
  t.equal(relayListening(child.pid!, 'net:[1]'), false, 'a pid in another namespace than the one named');
  t.equal(relayListening(child.pid!, null), false, 'a namespace that is gone: not listening');
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  t.equal(relayListening(child.pid!, id), false, 'the relay gone: not listening');
});
