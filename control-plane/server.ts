// Starts the control plane on a given runner: store (migrations applied),
// recovery against the runner, sweeper, HTTP listener. Returns a handle.
import { FileSigner } from './signing/index.js';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { pino, type Logger } from 'pino';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import type { CryptoProvider } from '../shared/proof/index.js';
import type { RunnerPort } from '../shared/runner-protocol.js';
import { requireMasterKey, type Config } from './config.js';
import { EnvelopeBox } from './secrets/envelope.js';
import { loadMasterKey } from './secrets/master-key.js';
import type { Clock, Random, Store } from './domain/index.js';
import { TierTable } from './domain/index.js';
import {
  capConnectionsPerSource,
  createApp,
  createMetrics,
  RateLimiter,
  FairGate,
  servedRoutes,
  type ConnectionGuard,
  type ServedRoute,
} from './http/app.js';
import { loadRegulatoryMapping, readSystemCapsulefiles } from './policy/index.js';
import {
  buildServices,
  systemClock,
  systemRandom,
  type BillingDeps,
  type RecoveryReport,
  type Services,
} from './service/index.js';
import { HostBaseImage } from './base-image/index.js';
import type { BaseImage } from './capsulefile/index.js';
import { openStores } from './store/index.js';
import { ProxyEgress, type ProxyEgressOptions } from './egress/index.js';
import { stripeBilling } from './billing/stripe.js';
import { HttpsWebhookSender, type WebhookResolver } from './webhooks/sender.js';
import { HttpsCosigner } from './webhooks/cosigner.js';
import { dnsAddresses, RunnerFleet } from './runner/index.js';
import { RunnerClient } from '../shared/node/runner-client.js';

export interface ControlPlane {
  url: string;
  port: number;
  store: Store;
  services: Services;
  /** null when the runner was unreachable at start. */
  recovery: RecoveryReport | null;
  /** The per-source connection cap of the listener. */
  connections: ConnectionGuard;
  /** Every method and path the app routes (compared with the OpenAPI registry in tests). */
  routes: ServedRoute[];
  close(): Promise<void>;
}

export interface StartOptions {
  clock?: Clock;
  random?: Random;
  logger?: Logger;
  /** Faster Node provider for POST /v1/verify and stored-proof checks. */
  proofCrypto?: CryptoProvider;
  /** The capsule base image inventory (default: this host's system prefix). */
  baseImage?: BaseImage;
  /**
   * Test seam of the sealed egress wiring: the upstream DNS resolver (tests map
   * their hostnames to 127.0.0.1) and the proxy bounds. Default: host DNS, the proxy's defaults.
   */
  egress?: Pick<ProxyEgressOptions, 'resolver' | 'limits'>;
  /** Test seam: the DNS resolver of webhook delivery (default: the system resolver). */
  webhookResolver?: WebhookResolver;
}

/**
 * `localRunner` is the one local runner; without it the control plane reaches the
 * network runners of config.remoteRunners (several, placed and heartbeated).
 */
export async function startControlPlane(
  config: Config,
  localRunner: RunnerPort | null,
  opts: StartOptions = {},
): Promise<ControlPlane> {
  const logger = opts.logger ?? pino({ level: config.logLevel, base: { svc: 'control-plane' } });
  const clock = opts.clock ?? systemClock;
  const random = opts.random ?? systemRandom;
  const masterKey = loadMasterKey(requireMasterKey(config), logger);
  const secrets = new EnvelopeBox(masterKey);
  masterKey.fill(0);
  const {
    store,
    capsulefiles,
    egressProfiles,
    keys,
    usage,
    billing: billingStore,
    webhooks: webhookStore,
    runners: runnerRegistry,
  } = await openStores(config.database);
  const remote = config.remoteRunners;
  let fleet: RunnerFleet | null = null;
  if (!localRunner) {
    if (!remote) throw new Error('startControlPlane: no runner (neither local nor CAPSULE_RUNNERS)');
    fleet = new RunnerFleet({
      addresses: remote.dns ? dnsAddresses(remote.dns.name, remote.dns.port) : () => Promise.resolve(remote.addresses),
      connect: (a) => new RunnerClient({ ...a, ...remote.tls }),
      registry: runnerRegistry,
      nowMs: () => clock.nowMs(),
      heartbeatMs: remote.heartbeatMs,
      affinity: remote.affinity,
      log: logger,
    });
    await fleet.start();
  }
  const runner: RunnerPort = localRunner ?? fleet!;
  const wh = config.webhooks;
  const webhookSender = new HttpsWebhookSender({
    allowPrivate: wh.allowPrivate,
    extraCaPem: wh.extraCaPem,
    ...(opts.webhookResolver ? { resolver: opts.webhookResolver } : {}),
  });
  const webhookBase = { value: '' };
  if (wh.allowPrivate)
    logger.warn({}, 'webhooks: private and loopback receivers allowed (CAPSULE_WEBHOOK_ALLOW_PRIVATE)');
  const egress = new ProxyEgress({
    socketDir: config.egressSocketDir,
    extraCaPem: config.egressExtraCaPem,
    budgets: config.egressBudgets,
    random,
    ...opts.egress,
    // Refusals carry host, port and reason only (no customer bytes).
    onRefusal: (capsuleId, r) =>
      logger.info({ capsule_id: capsuleId, host: r.host, port: r.port, reason: r.reason }, 'egress refused'),
  });
  // Billing return pages: the operator's, else under the base URL (filled in once the port is known).
  const billing: BillingDeps = {
    ...stripeBilling(config.stripe),
    prices: {
      ...(config.stripe.prices.starter ? { starter: config.stripe.prices.starter } : {}),
      ...(config.stripe.prices.business ? { business: config.stripe.prices.business } : {}),
    },
    successUrl: config.stripe.successUrl ?? '',
    cancelUrl: config.stripe.cancelUrl ?? '',
  };
  // Managed signing authority (docs/CONTROL_PLANE.md "Signing authority"); null = ephemeral keys.
  const signer = config.signing ? new FileSigner(config.signing, () => clock.nowIso()) : null;
  // Customer co-signing (Capsulefile signing_config): the webhook SSRF rule, the operator's client certificate.
  const cosign = new HttpsCosigner({
    allowPrivate: wh.allowPrivate,
    clientCertPem: wh.cosignClient?.certPem ?? null,
    clientKeyPem: wh.cosignClient?.keyPem ?? null,
    timeoutMs: wh.cosignTimeoutMs,
    ...(opts.webhookResolver ? { resolver: opts.webhookResolver } : {}),
    log: (fields, msg) => logger.warn(fields, msg),
  });
  // Service time, not the business clock: a test's clock jumping hours must not make anyone heavy.
  const gate = new FairGate(() => performance.now(), config.fairGate);
  const metrics = createMetrics(
    runner,
    () => store.queueDepths(),
    () => gate.queued,
  );
  const deps = {
    metrics,
    store,
    keys,
    usage,
    billingStore,
    billing,
    prices: config.prices,
    capsulefiles,
    egressProfiles,
    secrets,
    webhooks: {
      store: webhookStore,
      sender: webhookSender,
      allowPrivate: wh.allowPrivate,
      timeoutMs: wh.timeoutMs,
      concurrency: wh.concurrency,
      perEndpoint: wh.perEndpoint,
      pollMs: wh.pollMs,
      baseUrl: webhookBase,
    },
    // Sealed egress bridges a Unix socket of this process into the capsule: only a runner on this host can reach it.
    egress: localRunner ? egress : null,
    baseImage: opts.baseImage ?? new HostBaseImage(),
    capsulefileLimits: config.capsulefileLimits,
    runner,
    ...(fleet ? { runnerRegistry, runnerLostAfterMs: remote!.lostAfterMs } : {}),
    clock,
    random,
    tiers: new TierTable(config.paidTiers, config.uploadMaxBytes),
    regulatory: loadRegulatoryMapping(config.regulatoryMappingFile),
    region: config.region,
    maxActivityEvents: config.maxActivityEvents,
    log: logger,
    signer,
    cosign,
    proofCrypto: opts.proofCrypto ?? createNodeCrypto({ cacheKeys: true }),
  };
  const services = buildServices(deps, config.sweepIntervalMs);
  // A runner reachable again (or new): reconcile before the next capsule call.
  fleet?.onReconnect(() => services.recovery.reset());
  // The reference Capsulefiles are published before the first request.
  await services.capsulefiles.publishSystem(await readSystemCapsulefiles(config.systemCapsulefilesDir));
  // Reconcile with the runner now; if it is down, capsule calls retry it later.
  const recovery: RecoveryReport | null = await services.recovery.ensure().catch(() => null);
  const h = config.http;
  const server: Server = createServer({
    headersTimeout: h.headersTimeoutMs,
    requestTimeout: h.requestTimeoutMs,
    keepAliveTimeout: h.keepAliveTimeoutMs,
    maxHeaderSize: h.maxHeaderBytes,
    // How often the head and request timeouts are checked (node's default is 30 s).
    connectionsCheckingInterval: Math.min(1000, h.headersTimeoutMs),
  });
  server.maxRequestsPerSocket = h.maxRequestsPerSocket;
  let docsUrl = '';
  const connections = capConnectionsPerSource(server, h.maxConnectionsPerIp, () => docsUrl);
  await new Promise<void>((res, rej) => {
    server.once('error', rej);
    server.listen({ port: config.port, host: config.host, backlog: h.listenBacklog }, () => res());
  });
  const port = (server.address() as AddressInfo).port;
  const baseUrl = config.baseUrl ?? `http://${config.host}:${port}`;
  docsUrl = config.docsUrl ?? `${baseUrl}/docs`;
  webhookBase.value = baseUrl;
  billing.successUrl ||= `${baseUrl}/billing/success?session_id={CHECKOUT_SESSION_ID}`;
  billing.cancelUrl ||= `${baseUrl}/billing/cancel`;
  const app = createApp({
    services,
    store,
    runner,
    clock,
    random,
    logger,
    // Customer rate limits shared through PostgreSQL (several replicas); per process on SQLite (one node).
    limiter: new RateLimiter(
      () => clock.nowMs(),
      60_000,
      config.database.driver === 'postgresql' ? (key, start) => store.countRateHit(key, start) : null,
    ),
    gate,
    metrics,
    options: {
      docsUrl,
      rateLimits: config.rateLimits,
      version: config.version,
      http: h,
      metricsToken: config.metricsToken,
    },
  });
  // Requests under way, so that close() lets them finish (graceful shutdown) before it stops the rest.
  let inflight = 0;
  let drained: (() => void) | null = null;
  server.on('request', (_req, res: ServerResponse) => {
    inflight++;
    res.once('close', () => {
      if (--inflight === 0) drained?.();
    });
  });
  server.on('request', app.callback());
  services.sweeper.start();
  services.webhookWorker.start();
  logger.info({ port, driver: config.database.driver }, 'control plane listening');
  return {
    url: `http://${config.host}:${port}`,
    port,
    store,
    services,
    recovery,
    connections,
    routes: servedRoutes(app),
    async close() {
      // Stop accepting; requests under way finish (up to the grace period), then everything stops.
      const closed = new Promise<void>((res) => server.close(() => res()));
      server.closeIdleConnections();
      if (inflight > 0) {
        let timer: NodeJS.Timeout | undefined;
        await Promise.race([
          new Promise<void>((r) => (drained = r)),
          new Promise<void>((r) => (timer = setTimeout(r, config.shutdownGraceMs))),
        ]);
        clearTimeout(timer);
        if (inflight > 0) logger.warn({ inflight }, 'shutdown grace period over; closing requests still under way');
      }
      await services.sweeper.stop();
      await services.webhookWorker.stop();
      webhookSender.close();
      cosign.close();
      await services.egress.stopAll();
      await services.proofs.close();
      await fleet?.close();
      server.closeAllConnections();
      await closed;
      await store.close();
      secrets.destroy();
      signer?.close();
    },
  };
}
