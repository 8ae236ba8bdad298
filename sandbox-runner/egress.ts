// Sealed egress attachment (isolation layer 4, the one allowed path out):
// a named network namespace with only loopback, a socat relay listening on
// 127.0.0.1:3128 inside it that forwards to the capsule's proxy Unix socket
// on the host, and the sandbox entering that namespace (nsenter --net)
// instead of unsharing its own. No routable interface, DNS or UDP exists.
//
// WARNING: the relay runs on the host side as root with every capability
// dropped (empty bounding set, no_new_privs); it is the capsule's only
// neighbour outside the sandbox, so it must stay this small.
import { existsSync, lstatSync, readFileSync, readlinkSync, statSync, unlinkSync } from 'node:fs';
import { readdir, readFile, readlink } from 'node:fs/promises';
import { isAbsolute, join } from 'node:path';
import { RunnerError } from '../shared/runner-protocol.js';
import { spawner } from './spawner.js';
import { HOST_PATH } from './sandbox.js';

export const RELAY_PORT = 3128;
export const CA_INSIDE = '/etc/capsule-ca.pem';

export interface EgressState {
  netns: string;
  relay_pid: number | null;
  /** The capsule's proxy socket on the host (recorded so that recovery can remove it after a crash). */
  proxy_socket?: string;
}

export function netnsPath(name: string): string {
  return `/run/netns/${name}`;
}

export function validateEgress(e: unknown): { proxySocket: string; caPem: string } {
  const o = e as { proxy_socket?: unknown; ca_pem?: unknown } | null;
  if (!o || typeof o !== 'object') throw new RunnerError('invalid', 'egress: must be an object');
  if (typeof o.proxy_socket !== 'string' || !isAbsolute(o.proxy_socket) || o.proxy_socket.includes('\0')) {
    throw new RunnerError('invalid', 'egress.proxy_socket: must be an absolute path');
  }
  let isSock = false;
  try {
    isSock = lstatSync(o.proxy_socket).isSocket();
  } catch {
    isSock = false;
  }
  if (!isSock) throw new RunnerError('invalid', 'egress.proxy_socket: no Unix socket at that path');
  if (
    typeof o.ca_pem !== 'string' ||
    !o.ca_pem.includes('-----BEGIN CERTIFICATE-----') ||
    o.ca_pem.length > 64 * 1024
  ) {
    throw new RunnerError('invalid', 'egress.ca_pem: must be a PEM certificate bundle of at most 64 KiB');
  }
  return { proxySocket: o.proxy_socket, caPem: o.ca_pem };
}

/** The CA bundle a capsule with egress sees: the image's roots plus the capsule CA. */
export function caBundle(imageRoot: string, caPem: string): string {
  let system = '';
  try {
    system = readFileSync(join(imageRoot, 'etc/ssl/certs/ca-certificates.crt'), 'utf8');
  } catch {
    system = '';
  }
  return `${system}${system.endsWith('\n') || system === '' ? '' : '\n'}${caPem}\n`;
}

export function egressEnv(): Record<string, string> {
  const proxy = `http://127.0.0.1:${RELAY_PORT}`;
  return {
    HTTPS_PROXY: proxy,
    HTTP_PROXY: proxy,
    https_proxy: proxy,
    http_proxy: proxy,
    NO_PROXY: 'localhost,127.0.0.1,::1',
    no_proxy: 'localhost,127.0.0.1,::1',
    SSL_CERT_FILE: CA_INSIDE,
    NODE_EXTRA_CA_CERTS: CA_INSIDE,
    REQUESTS_CA_BUNDLE: CA_INSIDE,
    CURL_CA_BUNDLE: CA_INSIDE,
  };
}

/**
 * Whether the relay listens in the capsule's namespace (netns: its `net:[inode]`). The namespace is
 * new and the relay is all that lives in it until the sandbox joins, so any TCP socket in use there
 * (hashed: a listener counts from listen(), not from bind()) is the relay's. /proc/<pid>/net/sockstat
 * holds the namespace's own counters; /proc/<pid>/net/tcp walks the node's whole connection table
 * for every namespace, megabytes under a connection flood, and was read every 2 ms on the exec
 * thread (measured: 1.6 s of its busy time in 90 s of the soak, every tenant's exec waiting behind it).
 */
export function relayListening(pid: number, netns: string | null): boolean {
  if (!inNetns(pid, netns)) return false;
  try {
    const inUse = /^TCP: inuse (\d+)/m.exec(readFileSync(`/proc/${pid}/net/sockstat`, 'utf8'));
    return inUse !== null && Number(inUse[1]) > 0;
  } catch {
    return false;
  }
}

/** Runs `ip` from the spawner (spawner.ts), without waiting on the event loop for it. */
async function ip(args: string[]): Promise<{ status: number | null; stderr: string }> {
  const child = spawner.spawn('ip', args, { stdio: ['ignore', 'ignore', 'pipe'], env: { PATH: HOST_PATH } });
  let stderr = '';
  const failed = await child.ready.then(
    () => {
      child.stderr!.on('data', (b: Buffer) => (stderr += b.toString('utf8')));
      return '';
    },
    (e: Error) => e.message,
  );
  const [code] = await child.closed;
  return { status: failed ? 1 : (code ?? 1), stderr: stderr || failed };
}

/** Creates the namespace and starts the relay; resolves once the relay listens. */
export async function attachEgress(name: string, proxySocket: string): Promise<EgressState> {
  const add = await ip(['netns', 'add', name]);
  if (add.status !== 0) throw new RunnerError('internal', `egress: ip netns add failed: ${add.stderr.trim()}`);
  const state: EgressState = { netns: name, relay_pid: null };
  try {
    const lo = await ip(['-n', name, 'link', 'set', 'lo', 'up']);
    if (lo.status !== 0) throw new RunnerError('internal', `egress: loopback up failed: ${lo.stderr.trim()}`);
    const relay = spawner.spawn(
      'nsenter',
      [
        `--net=${netnsPath(name)}`,
        '--',
        'setpriv',
        '--bounding-set=-all',
        '--inh-caps=-all',
        '--nnp',
        '--',
        'socat',
        `TCP-LISTEN:${RELAY_PORT},bind=127.0.0.1,reuseaddr,fork,max-children=64`,
        `UNIX-CONNECT:${proxySocket}`,
      ],
      { stdio: ['ignore', 'ignore', 'ignore'], detached: true, env: { PATH: HOST_PATH } },
    );
    const pid = await relay.ready.catch(() => {
      throw new RunnerError('internal', 'egress: relay did not start');
    });
    state.relay_pid = pid;
    const end = Date.now() + 3000;
    const netns = netnsId(name);
    while (!relayListening(pid, netns)) {
      if (Date.now() > end || relay.exitCode !== null)
        throw new RunnerError('internal', 'egress: relay did not start listening');
      await new Promise((r) => setTimeout(r, 2));
    }
    return state;
  } catch (e) {
    await detachEgress(state);
    throw e;
  }
}

export interface EgressDetached {
  relay_stopped: boolean;
  netns_removed: boolean;
}

/** Kills the relay (its whole process group) and deletes the namespace; returns whether both are gone. */
export async function detachEgress(s: EgressState): Promise<EgressDetached> {
  // WARNING: a relay that already died leaves its pid (and so its process group
  // id) free for reuse by any host process. Signal the group only while its
  // leader still lives in the capsule's namespace; the sweep below covers the rest.
  if (s.relay_pid && inNetns(s.relay_pid, netnsId(s.netns))) {
    try {
      // The relay and its per-connection children share its process group (detached spawn).
      process.kill(-s.relay_pid, 'SIGKILL');
    } catch {
      /* already gone */
    }
  }
  // Confirm by namespace inode that nothing lives in the namespace any more.
  const end = Date.now() + 1000;
  let left = await processesInNetns(s.netns);
  while (left.length > 0 && Date.now() < end) {
    for (const pid of left) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        /* gone */
      }
    }
    await new Promise((r) => setTimeout(r, 5));
    left = await processesInNetns(s.netns);
  }
  await ip(['netns', 'delete', s.netns]);
  return { relay_stopped: left.length === 0, netns_removed: !existsSync(netnsPath(s.netns)) };
}

/** The named namespace as /proc/<pid>/ns/net shows it (`net:[inode]`), or null when it is gone. */
function netnsId(name: string): string | null {
  try {
    return `net:[${statSync(netnsPath(name)).ino}]`;
  } catch {
    return null;
  }
}

function inNetns(pid: number, id: string | null): boolean {
  try {
    return id !== null && readlinkSync(`/proc/${pid}/ns/net`) === id;
  } catch {
    return false;
  }
}

/**
 * Live (non-zombie) processes whose network namespace is the named one. The scan reads a link of
 * every process on the node (thousands beside a fork bomb: 77 ms in one piece, measured), so it
 * runs off the exec thread's loop, a batch of reads at a time.
 */
async function processesInNetns(name: string): Promise<number[]> {
  const want = netnsId(name);
  if (want === null) return [];
  const pids = (await readdir('/proc')).filter((p) => /^\d+$/.test(p));
  const out: number[] = [];
  // A few at a time: the reads share libuv's thread pool with every other file call of the runner.
  for (let i = 0; i < pids.length; i += 8) {
    await Promise.all(
      pids.slice(i, i + 8).map(async (p) => {
        try {
          if ((await readlink(`/proc/${p}/ns/net`)) !== want) return;
          const st = await readFile(`/proc/${p}/stat`, 'utf8');
          if (st[st.lastIndexOf(')') + 2] !== 'Z') out.push(Number(p));
        } catch {
          /* gone */
        }
      }),
    );
  }
  return out;
}

/**
 * Recovery after a crash: the recorded relay pid may have been reused, so
 * kill exactly the processes that live in the capsule's namespace (by
 * namespace inode), then delete it.
 */
export async function recoverEgress(
  s: EgressState,
): Promise<{ relay_stopped: boolean; netns_removed: boolean; proxy_socket_removed: boolean | null }> {
  const r = await detachEgress({ netns: s.netns, relay_pid: null });
  return { ...r, proxy_socket_removed: s.proxy_socket ? removeSocketFile(s.proxy_socket) : null };
}

/**
 * Removes the lost capsule's proxy socket file: only a socket (lstat, so a
 * link put in its place is never followed). True when nothing is left there.
 */
function removeSocketFile(path: string): boolean {
  try {
    if (!lstatSync(path).isSocket()) return false;
    unlinkSync(path);
    return true;
  } catch (e) {
    return (e as NodeJS.ErrnoException).code === 'ENOENT';
  }
}
