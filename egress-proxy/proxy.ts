// The per-capsule proxy: listeners (Unix socket for the capsule relay,
// optional loopback TCP for tests), CONNECT tunnels terminated with the
// per-capsule CA, absolute-URI plain HTTP, and the lifecycle.
import { randomBytes } from 'node:crypto';
import { chmod, lstat, unlink } from 'node:fs/promises';
import { createServer as createHttpServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer, type Socket } from 'node:net';
import { TLSSocket } from 'node:tls';
import { admit, splitAuthority } from './admission.js';
import { formatIp, parseIp } from './address.js';
import { compilePolicy } from './allowlist.js';
import { BudgetHold, ByteBudget } from './budget.js';
import { CapsuleCa, type KeyDestructionEvidence } from './ca.js';
import { systemClock, systemResolver, validateConfig, type EgressProxyConfig } from './config.js';
import { EventQueue } from './event-queue.js';
import { forward, sendError } from './exchange.js';
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

/** Starts one capsule's proxy. Concurrent capsules each get their own instance (own CA, pools, listeners). */
export async function startEgressProxy(config: EgressProxyConfig): Promise<EgressProxy> {
  validateConfig(config);
  const policy = compilePolicy(config.profileRules, config.declaration);
  const limits: EgressLimits = { ...DEFAULT_LIMITS, ...config.limits };
  const clock = config.clock ?? systemClock;
  const resolver = config.resolver ?? systemResolver;
  const random = config.random ?? ((n: number) => randomBytes(n));
  const ca = new CapsuleCa({
    capsuleId: config.capsuleId,
    random,
    nowMs: () => Date.parse(clock.nowIso()),
    validityHours: limits.caValidityHours,
  });
  const pools = createPools(limits.maxSocketsPerDestination);
  let exchanges = 0;
  let callbackErrors = 0;
  let stopping = false;
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

  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };
  const tunnels = new WeakMap<Socket, Target>();

  // Requests inside CONNECT tunnels (TLS-terminated or plain).
  const inner = createHttpServer(
    { keepAliveTimeout: 30_000, headersTimeout: 30_000, requestTimeout: limits.maxExchangeMs },
    (req, res) => {
      const target = tunnels.get(req.socket);
      if (!target) {
        sendError(res, 500, 'internal', 'tunnel lost');
        return;
      }
      // Host must name the CONNECT target: no domain fronting to another name behind the checked address.
      if (!hostMatches(String(req.headers.host ?? ''), target)) {
        rt.refuse({ host: target.host, port: target.port, reason: 'host_header_mismatch' });
        sendError(res, 421, 'host_header_mismatch', 'Host header does not match the CONNECT destination');
        return;
      }
      const path = req.url ?? '/';
      if (!path.startsWith('/')) {
        sendError(res, 400, 'bad_target', 'origin-form request target expected inside a tunnel');
        return;
      }
      forward(rt, req, res, target, path);
    },
  );

  const outer = createHttpServer(
    { keepAliveTimeout: 30_000, headersTimeout: 30_000, requestTimeout: limits.maxExchangeMs },
    (req: IncomingMessage, res: ServerResponse) => {
      // Absolute-URI plain HTTP (HTTP_PROXY).
      let url: URL;
      try {
        url = new URL(req.url ?? '');
      } catch {
        sendError(res, 400, 'bad_target', 'absolute http:// URI expected (this is a forward proxy)');
        return;
      }
      if (url.protocol !== 'http:') {
        sendError(res, 400, 'bad_target', 'only http:// URIs are proxied in plain form; use CONNECT for https');
        return;
      }
      const port = url.port === '' ? 80 : Number(url.port);
      const host = url.hostname.replace(/^\[|\]$/g, '');
      req.pause();
      void admit(policy, resolver, limits.resolveTimeoutMs, 'http', host, port).then(
        (a) => {
          if (!a.ok) {
            rt.refuse({ host, port, reason: a.reason, detail: a.detail });
            sendError(res, a.status, a.reason, a.detail);
            return;
          }
          req.resume();
          forward(rt, req, res, a.target, `${url.pathname}${url.search}`);
        },
        () => sendError(res, 500, 'internal', 'admission failed'),
      );
    },
  );

  const refuseConnect = (sock: Socket, status: number, reason: string, detail: string) => {
    const body = `capsule egress: ${detail}\n`;
    sock.end(
      `HTTP/1.1 ${status} ${status === 403 ? 'Forbidden' : status === 400 ? 'Bad Request' : status === 504 ? 'Gateway Timeout' : 'Bad Gateway'}\r\n` +
        `content-type: text/plain; charset=utf-8\r\nx-capsule-egress-error: ${reason}\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
    );
  };

  outer.on('connect', (req: IncomingMessage, sock: Socket, head: Buffer) => {
    sock.on('error', () => sock.destroy());
    const auth = splitAuthority(req.url ?? '');
    if (!auth) {
      refuseConnect(sock, 400, 'bad_target', 'CONNECT needs host:port');
      return;
    }
    void admit(policy, resolver, limits.resolveTimeoutMs, 'https', auth.host, auth.port).then(
      (a) => {
        if (!a.ok) {
          rt.refuse({ host: auth.host.toLowerCase(), port: auth.port, reason: a.reason, detail: a.detail });
          refuseConnect(sock, a.status, a.reason, a.detail);
          return;
        }
        if (stopping || sock.destroyed) {
          sock.destroy();
          return;
        }
        sock.write('HTTP/1.1 200 Connection Established\r\n\r\n');
        // A tunnel that never handshakes or goes silent is closed (client-side slow loris).
        sock.setTimeout(limits.idleTimeoutMs, () => sock.destroy());
        const start = (first: Buffer) => {
          sock.pause();
          sock.unshift(first);
          if (first[0] === 0x16) {
            // TLS ClientHello: terminate with a leaf for the CONNECT host (SNI is ignored on purpose).
            let ctx;
            try {
              ctx = ca.contextFor(a.target.host, a.target.hostIsIp);
            } catch {
              sock.destroy();
              return;
            }
            const tls = new TLSSocket(sock, { isServer: true, secureContext: ctx, ALPNProtocols: ['http/1.1'] });
            tls.on('error', () => tls.destroy());
            track(tls);
            tunnels.set(tls, a.target);
            inner.emit('connection', tls);
          } else {
            // Only TLS is carried in tunnels (no raw TCP protocols); plain HTTP uses absolute-URI requests.
            rt.refuse({
              host: a.target.host,
              port: a.target.port,
              reason: 'unsupported',
              detail: 'non-TLS bytes in a CONNECT tunnel',
            });
            const body = 'capsule egress: CONNECT tunnels carry TLS only; send plain HTTP as an absolute-URI request\n';
            sock.end(
              `HTTP/1.1 400 Bad Request\r\ncontent-type: text/plain; charset=utf-8\r\nx-capsule-egress-error: unsupported\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
            );
          }
        };
        if (head.length > 0) start(head);
        else sock.once('data', start);
      },
      () => refuseConnect(sock, 502, 'internal', 'admission failed'),
    );
  });

  for (const srv of [outer, inner]) {
    srv.on('upgrade', (_req: IncomingMessage, sock: Socket) => {
      sock.end('HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
    });
    srv.on('clientError', (_err: Error, sock: Socket) => {
      if (sock.writable) sock.end('HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n');
      else sock.destroy();
    });
  }
  outer.on('connection', track);

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
          stopping = true;
          // In-flight exchanges end now, so their last events precede stop()'s result (and DestructionInitiated).
          for (const abort of [...rt.inFlight]) abort();
          queue.flushTruncation();
          const closing = listeners.map((l) => new Promise<void>((r) => l.close(() => r())));
          outer.closeAllConnections();
          inner.closeAllConnections();
          for (const s of sockets) s.destroy();
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
