// The per-capsule proxy: listeners (Unix socket for the capsule relay,
// optional loopback TCP for tests), CONNECT tunnels terminated with the
// per-capsule CA, absolute-URI plain HTTP, and the lifecycle.
import { randomBytes } from 'node:crypto';
import { chmod, lstat, unlink } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { admit, splitAuthority, type Resolver } from './admission.js';
import { formatIp, parseIp } from './address.js';
import { compilePolicy, type CompiledPolicy } from './allowlist.js';
import { BudgetHold, ByteBudget } from './budget.js';
import { CapsuleCa, type KeyDestructionEvidence } from './ca.js';
import { systemClock, systemResolver, validateConfig, type EgressProxyConfig } from './config.js';
import { EventQueue } from './event-queue.js';
import { forward } from './exchange.js';
import { REFUSALS, refuse, refuseRaw } from './refusals.js';
import { DEFAULT_LIMITS, type EgressLimits, type Runtime, type Target } from './runtime.js';
import { createPools, upstreamTrust } from './upstream.js';

export interface EgressProxy {
  /** PEM of the per-capsule CA: write it into the capsule's tmpfs and point the trust env variables at it. */
  readonly caPem: string;
  readonly socketPath: string | undefined;
  /** Bound loopback address, when `tcp` was configured. */
  readonly tcpAddress: { host: string; port: number } | undefined;
  /** Event-callback throws (and rejections) swallowed so far (should stay 0). */
  readonly droppedCallbackErrors: number;
  /** Events handed to onEvent whose promise has not settled yet (at most limits.maxQueuedEvents). */
  readonly queuedEvents: number;
  /** Bytes this capsule's exchanges hold now for inspection (at most limits.inspectBudgetBytes). */
  readonly inspectBytesHeld: number;
  /** Closes the listeners and every connection, then destroys the CA and leaf keys. Idempotent. */
  stop(): Promise<KeyDestructionEvidence>;
}

async function removeStaleSocket(path: string): Promise<void> {
  try {
    const st = await lstat(path);
    if (!st.isSocket()) throw new Error(`egress proxy: ${path} exists and is not a socket`);
    await unlink(path);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

const listen = (srv: NetServer | Server, arg: string | { host: string; port: number }) =>
  new Promise<void>((resolve, reject) => {
    srv.once('error', reject);
    const done = () => {
      srv.off('error', reject);
      resolve();
    };
    if (typeof arg === 'string') srv.listen(arg, done);
    else srv.listen(arg.port, arg.host, done);
  });

/** Host header "name[:port]" / "[v6][:port]" names the tunnel's target (port optional). */
function hostMatches(header: string, t: Target): boolean {
  const m = /^\[([^\]]+)\](?::(\d+))?$/.exec(header) ?? /^([^:[\]]+)(?::(\d+))?$/.exec(header);
  if (!m) return false;
  let name = (m[1] as string).toLowerCase();
  if (name.endsWith('.')) name = name.slice(0, -1);
  const ip = parseIp(name);
  if (ip) name = formatIp(ip);
  return name === t.host && (m[2] === undefined || Number(m[2]) === t.port);
}

/** Per-proxy state the listeners share. */
interface Proxy {
  rt: Runtime;
  policy: CompiledPolicy;
  resolver: Resolver;
  ca: CapsuleCa;
  /** Client sockets (outer connections and terminated tunnels), destroyed at stop(). */
  sockets: Set<Socket>;
  /** The CONNECT target of each terminated tunnel. */
  tunnels: WeakMap<Socket, Target>;
  stopping: boolean;
}

const track = (p: Proxy, s: Socket) => {
  p.sockets.add(s);
  s.once('close', () => p.sockets.delete(s));
};

/** Requests inside a CONNECT tunnel: origin-form, Host naming the CONNECT target. */
function tunnelRequest(p: Proxy, req: IncomingMessage, res: ServerResponse): void {
  const target = p.tunnels.get(req.socket);
  if (!target) return refuse(res, 'tunnel_lost', 'tunnel lost');
  // Host must name the CONNECT target: no domain fronting to another name behind the checked address.
  if (!hostMatches(String(req.headers.host ?? ''), target)) {
    p.rt.refuse({ host: target.host, port: target.port, reason: 'host_header_mismatch' });
    return refuse(res, 'host_header_mismatch', 'Host header does not match the CONNECT destination');
  }
  const path = req.url ?? '/';
  if (!path.startsWith('/')) return refuse(res, 'bad_target', 'origin-form request target expected inside a tunnel');
  forward(p.rt, req, res, target, path);
}

/** Absolute-URI plain HTTP (HTTP_PROXY). */
function plainRequest(p: Proxy, req: IncomingMessage, res: ServerResponse): void {
  let url: URL;
  try {
    url = new URL(req.url ?? '');
  } catch {
    return refuse(res, 'bad_target', 'absolute http:// URI expected (this is a forward proxy)');
  }
  if (url.protocol !== 'http:')
    return refuse(res, 'bad_target', 'only http:// URIs are proxied in plain form; use CONNECT for https');
  const port = url.port === '' ? 80 : Number(url.port);
  const host = url.hostname.replace(/^\[|\]$/g, '');
  req.pause();
  void admit(p.policy, p.resolver, p.rt.limits.resolveTimeoutMs, 'http', host, port).then(
    (a) => {
      if (!a.ok) {
        p.rt.refuse({ host, port, reason: REFUSALS[a.kind].code, detail: a.detail });
        return refuse(res, a.kind, a.detail);
      }
      req.resume();
      forward(p.rt, req, res, a.target, `${url.pathname}${url.search}`);
    },
    () => refuse(res, 'admission_failed', 'admission failed'),
  );
}

/** CONNECT: admit the destination, then terminate the tunnel's TLS with a leaf for the CONNECT host. */
function connectRequest(p: Proxy, inner: Server, req: IncomingMessage, sock: Socket, head: Buffer): void {
  sock.on('error', () => sock.destroy());
  const auth = splitAuthority(req.url ?? '');
  if (!auth) return refuseRaw(sock, 'bad_target', 'CONNECT needs host:port');
  const limits = p.rt.limits;
  void admit(p.policy, p.resolver, limits.resolveTimeoutMs, 'https', auth.host, auth.port).then(
    (a) => {
      if (!a.ok) {
        const host = auth.host.toLowerCase();
        p.rt.refuse({ host, port: auth.port, reason: REFUSALS[a.kind].code, detail: a.detail });
        return refuseRaw(sock, a.kind, a.detail);
      }
      if (p.stopping || sock.destroyed) return void sock.destroy();
      sock.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      // A tunnel that never handshakes or goes silent is closed (client-side slow loris).
      sock.setTimeout(limits.idleTimeoutMs, () => sock.destroy());
      const start = (first: Buffer) => {
        sock.pause();
        sock.unshift(first);
        if (first[0] !== 0x16) {
          // Only TLS is carried in tunnels (no raw TCP protocols); plain HTTP uses absolute-URI requests.
          const detail = 'non-TLS bytes in a CONNECT tunnel';
          p.rt.refuse({ host: a.target.host, port: a.target.port, reason: 'unsupported', detail });
          return refuseRaw(
            sock,
            'tunnel_not_tls',
            'CONNECT tunnels carry TLS only; send plain HTTP as an absolute-URI request',
          );
        }
        // TLS ClientHello: terminate with a leaf for the CONNECT host (SNI is ignored on purpose).
        let ctx;
        try {
          ctx = p.ca.contextFor(a.target.host, a.target.hostIsIp);
        } catch {
          return void sock.destroy();
        }
        const tls = new TLSSocket(sock, { isServer: true, secureContext: ctx, ALPNProtocols: ['http/1.1'] });
        tls.on('error', () => tls.destroy());
        track(p, tls);
        p.tunnels.set(tls, a.target);
        inner.emit('connection', tls);
      };
      if (head.length > 0) start(head);
      else sock.once('data', start);
    },
    () => refuseRaw(sock, 'admission_failed', 'admission failed'),
  );
}

/** The two HTTP servers: `outer` for what the capsule sends, `inner` for requests inside tunnels. */
function servers(p: Proxy): { outer: Server; inner: Server } {
  const opts = { keepAliveTimeout: 30_000, headersTimeout: 30_000, requestTimeout: p.rt.limits.maxExchangeMs };
  const inner = createHttpServer(opts, (req, res) => tunnelRequest(p, req, res));
  const outer = createHttpServer(opts, (req, res) => plainRequest(p, req, res));
  outer.on('connect', (req: IncomingMessage, sock: Socket, head: Buffer) => connectRequest(p, inner, req, sock, head));
  for (const srv of [outer, inner]) {
    srv.on('upgrade', (_req: IncomingMessage, sock: Socket) =>
      refuseRaw(sock, 'upgrade', 'Upgrade (WebSocket) is not supported'),
    );
    srv.on('clientError', (_err: Error, sock: Socket) => refuseRaw(sock, 'malformed_request', 'malformed request'));
  }
  outer.on('connection', (s: Socket) => track(p, s));
  return { outer, inner };
}

/** Starts one capsule's proxy. Concurrent capsules each get their own instance (own CA, pools, listeners). */
export async function startEgressProxy(config: EgressProxyConfig): Promise<EgressProxy> {
  validateConfig(config);
  const limits: EgressLimits = { ...DEFAULT_LIMITS, ...config.limits };
  const clock = config.clock ?? systemClock;
  const random = config.random ?? ((n: number) => randomBytes(n));
  const ca = await CapsuleCa.create({
    capsuleId: config.capsuleId,
    random,
    nowMs: () => Date.parse(clock.nowIso()),
    validityHours: limits.caValidityHours,
  });
  const pools = createPools(limits.maxSocketsPerDestination);
  let exchanges = 0;
  let callbackErrors = 0;
  const budgets = [
    new ByteBudget(limits.inspectBudgetBytes),
    ...(config.processInspectBudget ? [config.processInspectBudget] : []),
  ];
  const queue = new EventQueue(limits.maxQueuedEvents, config.onEvent, () => clock.nowIso());
  const rt: Runtime = {
    mcpPolicy: config.mcpPolicy,
    limits,
    pools,
    trust: upstreamTrust(config.extraCaPem),
    clock,
    emit: (e) => queue.emit(e),
    refuse: (r) => {
      try {
        config.onRefusal?.({ at: clock.nowIso(), ...r });
      } catch {
        callbackErrors++;
      }
    },
    nextExchange: () => ++exchanges,
    hold: () => new BudgetHold(budgets),
    inFlight: new Set(),
  };
  const p: Proxy = {
    rt,
    policy: compilePolicy(config.profileRules, config.declaration),
    resolver: config.resolver ?? systemResolver,
    ca,
    sockets: new Set(),
    tunnels: new WeakMap(),
    stopping: false,
  };
  const { outer, inner } = servers(p);

  const listeners: NetServer[] = [];
  try {
    if (config.socketPath) {
      await removeStaleSocket(config.socketPath);
      await listen(outer, config.socketPath);
      await chmod(config.socketPath, 0o600);
      listeners.push(outer);
    }
    let tcpAddress: { host: string; port: number } | undefined;
    if (config.tcp) {
      // Second listener feeds the same HTTP server.
      const tcpServer = config.socketPath ? createNetServer((s) => outer.emit('connection', s)) : outer;
      await listen(tcpServer, config.tcp);
      const a = tcpServer.address() as AddressInfo;
      tcpAddress = { host: a.address, port: a.port };
      if (tcpServer !== outer) listeners.push(tcpServer as NetServer);
      else listeners.push(outer);
    }

    let stopped: Promise<KeyDestructionEvidence> | null = null;
    return {
      caPem: ca.caPem,
      socketPath: config.socketPath,
      tcpAddress,
      get droppedCallbackErrors() {
        return callbackErrors + queue.callbackErrors;
      },
      get queuedEvents() {
        return queue.pending;
      },
      get inspectBytesHeld() {
        return budgets[0]!.used;
      },
      stop() {
        stopped ??= (async () => {
          p.stopping = true;
          // In-flight exchanges end now, so their last events precede stop()'s result (and DestructionInitiated).
          for (const abort of [...rt.inFlight]) abort();
          queue.flushTruncation();
          const closing = listeners.map((l) => new Promise<void>((r) => l.close(() => r())));
          outer.closeAllConnections();
          inner.closeAllConnections();
          for (const s of p.sockets) s.destroy();
          pools.http.destroy();
          pools.https.destroy();
          await Promise.all(closing);
          return ca.destroy(clock.nowIso());
        })();
        return stopped;
      },
    };
  } catch (err) {
    for (const l of listeners) l.close();
    ca.destroy(clock.nowIso());
    pools.http.destroy();
    pools.https.destroy();
    throw err;
  }
}
