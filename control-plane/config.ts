// The one place that reads process.env: read once at start into a typed,
// validated object. Everything else receives a Config.
import { createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { RunnerTlsTarget } from '../shared/node/runner-client.js';
import { PROC_SWAPS } from '../shared/node/swaps.js';
import { FREE_LIMITS, type PaidTierTable, type PriceTable } from './domain/index.js';
import { METERED, toMicros, TIERS } from './domain/index.js';

export type DatabaseConfig =
  { driver: 'sqlite'; file: string; synchronous: 'full' | 'normal' } | { driver: 'postgresql'; url: string };

/** Where the master key lives; generateIfMissing only for the embedded SQLite default. */
export interface MasterKeyConfig {
  file: string;
  generateIfMissing: boolean;
}

/** Default cap of one capsule's activity trail (docs/CONTROL_PLANE.md): bounds its proof's size and build memory. */
export const DEFAULT_MAX_ACTIVITY_EVENTS = 10_000;

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  database: DatabaseConfig;
  /** Unix socket of a separately started runner; null = `capsule serve` spawns one. */
  runnerSocket: string | null;
  /**
   * CAPSULE_RUNNERS (`host:port[,host:port...]` or `dns:<name>:<port>`) with
   * CAPSULE_RUNNER_CLIENT_CA_FILE, _CERT_FILE and _KEY_FILE: runners on other machines over
   * mutual TLS (`capsule serve` then spawns none). null = one local runner.
   */
  remoteRunners: RemoteRunners | null;
  /** CAPSULE_METRICS_TOKEN: bearer token for `GET /metrics`; null = unauthenticated (keep it off public networks). */
  metricsToken: string | null;
  /** CAPSULE_SHUTDOWN_GRACE_MS (default 20000): how long a stop waits for requests under way. */
  shutdownGraceMs: number;
  /** Public base URL; null = derived from the listening address at start. */
  baseUrl: string | null;
  /** Error docs root (`{docs_url}/errors/<code>`); null = `{base_url}/docs`. */
  docsUrl: string | null;
  region: string;
  /** Per-IP and per-customer limits; only benchmarks turn them off. */
  rateLimits: boolean;
  sweepIntervalMs: number;
  /** Events one capsule's activity trail may hold (CAPSULE_MAX_ACTIVITY_EVENTS); past it events are counted, not stored. */
  maxActivityEvents: number;
  /** Install-wide ceiling on one upload body over every tier's `upload_max_bytes`; null = the tier values alone. */
  uploadMaxBytes: number | null;
  /** Bounds of the HTTP listener (hostile clients: connection floods, slow clients, oversized bodies). */
  http: HttpLimits;
  paidTiers: PaidTierTable;
  regulatoryMappingFile: string;
  logLevel: string;
  version: string;
  /** Source directories of the service-published reference Capsulefiles. */
  systemCapsulefilesDir: string;
  /** Extra upstream trust anchors for sealed egress (PEM read from the file CAPSULE_EGRESS_EXTRA_CA); null = system roots only. */
  egressExtraCaPem: string | null;
  /** Directory of the per-capsule egress proxy sockets; must be reachable by the runner (CAPSULE_EGRESS_SOCKET_DIR, default <dataDir>/egress). */
  egressSocketDir: string;
  /** What the sealed egress layer may hold in memory (docs/EGRESS.md section 6). */
  egressBudgets: EgressBudgets;
  /** Per-tier Capsulefile limits (policies/capsulefile-tier-limits.yaml). */
  capsulefileLimits: Record<
    'free' | 'starter' | 'business' | 'enterprise',
    { max_memory_mb: number; max_capsulefiles: number | null }
  >;
  /** The key that seals secrets at rest (CAPSULE_MASTER_KEY_FILE; embedded default: <dataDir>/master.key); null = not configured. */
  masterKey: MasterKeyConfig | null;
  /** The swap table `capsule serve` checks at start (SPEC §11) and hands to its runner; /proc/swaps unless a test sets CAPSULE_PROC_SWAPS. */
  procSwaps: string;
  /** Price table of the usage estimate (CAPSULE_PRICES_FILE, default policies/prices.yaml). */
  prices: PriceTable;
  stripe: StripeConfig;
  /** Managed signing authority (CAPSULE_SIGNING_AUTHORITY_ID + CAPSULE_SIGNING_KEY_FILES); null = ephemeral keys. */
  signing: SigningConfig | null;
  webhooks: WebhookConfig;
  /** Heavy tenants' turns at the API (control-plane/http/fair-gate.ts; docs/CONTROL_PLANE.md). */
  fairGate: FairGateConfig;
}

/** Heavy tenants' turns at the API: the CAPSULE_FAIR_* settings. */
export interface FairGateConfig {
  /** Requests of heavy accounts in service at once while a light account is active; 0 turns the gate off. */
  heavySlots: number;
  /** Requests outstanding on average lately at which an account counts as heavy. */
  heavyLoad: number;
  /** A heavy request gives its slot back after this even if it has not ended (long execs, slow uploads). */
  leaseMs: number;
  /** An account's time in the service counts half after this long. */
  halfLifeMs: number;
  /** A light account's request keeps heavy accounts to their slots for this long. */
  lightWindowMs: number;
  /** A heavy request waits at most this long for a slot. */
  maxWaitMs: number;
}

function fairGateConfig(env: NodeJS.ProcessEnv): FairGateConfig {
  const raw = env.CAPSULE_FAIR_HEAVY_LOAD;
  const heavyLoad = raw === undefined || raw === '' ? 1.5 : Number(raw);
  if (!Number.isFinite(heavyLoad) || heavyLoad < 0.1 || heavyLoad > 10_000)
    throw new ConfigError('CAPSULE_FAIR_HEAVY_LOAD: a number from 0.1 to 10000');
  return {
    heavySlots: intEnv(env, 'CAPSULE_FAIR_HEAVY_SLOTS', 1, 0, 10_000),
    heavyLoad,
    leaseMs: intEnv(env, 'CAPSULE_FAIR_LEASE_MS', 1000, 1, 600_000),
    halfLifeMs: intEnv(env, 'CAPSULE_FAIR_HALF_LIFE_MS', 2000, 10, 3_600_000),
    lightWindowMs: intEnv(env, 'CAPSULE_FAIR_LIGHT_WINDOW_MS', 1000, 1, 3_600_000),
    maxWaitMs: intEnv(env, 'CAPSULE_FAIR_MAX_WAIT_MS', 10_000, 1, 600_000),
  };
}

/** A managed signing authority: its id and the key file of each version (PKCS#8 PEM Ed25519). */
export interface SigningConfig {
  authorityId: string;
  /** Ascending by version; the highest version whose file is present signs. */
  keyFiles: { version: number; path: string }[];
}

const AUTHORITY_ID = /^[a-z0-9][a-z0-9-]{0,62}$/;

function signingConfig(env: NodeJS.ProcessEnv): SigningConfig | null {
  const id = env['CAPSULE_SIGNING_AUTHORITY_ID'] ?? '';
  const files = env['CAPSULE_SIGNING_KEY_FILES'] ?? '';
  if (id === '' && files === '') return null;
  if (id === '') throw new ConfigError('CAPSULE_SIGNING_AUTHORITY_ID: required with CAPSULE_SIGNING_KEY_FILES');
  if (files === '') throw new ConfigError('CAPSULE_SIGNING_KEY_FILES: required with CAPSULE_SIGNING_AUTHORITY_ID');
  if (!AUTHORITY_ID.test(id))
    throw new ConfigError('CAPSULE_SIGNING_AUTHORITY_ID: lowercase letters, digits and "-", at most 63');
  const keyFiles: { version: number; path: string }[] = [];
  for (const part of files.split(',')) {
    const m = /^(\d{1,9}):(.+)$/.exec(part.trim());
    const version = m ? Number(m[1]) : 0;
    if (!m || version < 1) throw new ConfigError('CAPSULE_SIGNING_KEY_FILES: <version>:<path>[,...] with version >= 1');
    if (keyFiles.some((k) => k.version === version))
      throw new ConfigError(`CAPSULE_SIGNING_KEY_FILES: version ${version} given twice`);
    keyFiles.push({ version, path: resolve(m[2]!) });
  }
  keyFiles.sort((a, b) => a.version - b.version);
  return { authorityId: id, keyFiles };
}

/** Webhook delivery (docs/WEBHOOKS.md). */
export interface WebhookConfig {
  /** CAPSULE_WEBHOOK_ALLOW_PRIVATE=1: loopback/private receivers, plain http and extra trust anchors allowed (development, tests, self-hosted). */
  allowPrivate: boolean;
  /** CAPSULE_WEBHOOK_EXTRA_CA: PEM trust anchors added for receivers (only with allowPrivate). */
  extraCaPem: string | null;
  /** CAPSULE_WEBHOOK_TIMEOUT_MS (default 10000): one attempt, connect to last response byte. */
  timeoutMs: number;
  /** CAPSULE_WEBHOOK_CONCURRENCY (default 16): attempts in flight in this process; 0 = this process does not deliver. */
  concurrency: number;
  /** CAPSULE_WEBHOOK_PER_ENDPOINT (default 2): attempts in flight to one endpoint from this process. */
  perEndpoint: number;
  /** CAPSULE_WEBHOOK_POLL_MS (default 500): how often the outbox is read when nothing wakes the worker. */
  pollMs: number;
  /**
   * CAPSULE_COSIGN_CLIENT_CERT_FILE and CAPSULE_COSIGN_CLIENT_KEY_FILE (both or neither): the
   * operator's client certificate presented to customers' co-signing services (mutual TLS).
   */
  cosignClient: { certPem: string; keyPem: string } | null;
  /** CAPSULE_COSIGN_TIMEOUT_MS (default 5000): one co-signing call. */
  cosignTimeoutMs: number;
}

function intEnv(env: NodeJS.ProcessEnv, name: string, dflt: number, min: number, max: number): number {
  const raw = env[name];
  if (raw === undefined || raw === '') return dflt;
  const v = Number(raw);
  if (!Number.isSafeInteger(v) || v < min || v > max)
    throw new ConfigError(`${name}: an integer from ${min} to ${max}`);
  return v;
}

function webhookConfig(env: NodeJS.ProcessEnv): WebhookConfig {
  let allowPrivate: boolean;
  try {
    allowPrivate = bool(env.CAPSULE_WEBHOOK_ALLOW_PRIVATE, false);
  } catch (e) {
    throw new ConfigError(`CAPSULE_WEBHOOK_ALLOW_PRIVATE: ${(e as Error).message}`);
  }
  let extraCaPem: string | null = null;
  const caFile = env.CAPSULE_WEBHOOK_EXTRA_CA;
  if (caFile) {
    if (!allowPrivate)
      throw new ConfigError(
        'CAPSULE_WEBHOOK_EXTRA_CA: only with CAPSULE_WEBHOOK_ALLOW_PRIVATE=1 (development receivers)',
      );
    try {
      extraCaPem = readFileSync(caFile, 'utf8');
    } catch (e) {
      throw new ConfigError(`CAPSULE_WEBHOOK_EXTRA_CA (${caFile}): ${e instanceof Error ? e.message : String(e)}`);
    }
    if (!extraCaPem.includes('-----BEGIN CERTIFICATE-----'))
      throw new ConfigError(`CAPSULE_WEBHOOK_EXTRA_CA (${caFile}): no PEM certificate in the file`);
  }
  return {
    allowPrivate,
    extraCaPem,
    timeoutMs: intEnv(env, 'CAPSULE_WEBHOOK_TIMEOUT_MS', 10_000, 100, 60_000),
    concurrency: intEnv(env, 'CAPSULE_WEBHOOK_CONCURRENCY', 16, 0, 1024),
    perEndpoint: intEnv(env, 'CAPSULE_WEBHOOK_PER_ENDPOINT', 2, 1, 64),
    pollMs: intEnv(env, 'CAPSULE_WEBHOOK_POLL_MS', 500, 10, 60_000),
    cosignClient: cosignClient(env),
    cosignTimeoutMs: intEnv(env, 'CAPSULE_COSIGN_TIMEOUT_MS', 5000, 100, 60_000),
  };
}

/** Network runners and how this control plane reaches and places on them (docs/CONTROL_PLANE.md "Several runners"). */
export interface RemoteRunners {
  /** Fixed addresses; empty with `dns`. */
  addresses: { host: string; port: number }[];
  /** A name resolved every heartbeat to all its addresses (a Kubernetes headless Service). */
  dns: { name: string; port: number } | null;
  tls: Pick<RunnerTlsTarget, 'ca' | 'cert' | 'key'>;
  /** CAPSULE_RUNNER_HEARTBEAT_MS (default 5000): how often each runner is greeted and the registry refreshed. */
  heartbeatMs: number;
  /** CAPSULE_RUNNER_LOST_AFTER_MS (default 30000): unreached by every control plane this long, a runner is lost. */
  lostAfterMs: number;
  /** CAPSULE_PLACEMENT_LABEL=key=value: runners with this label are preferred while one has room. */
  affinity: { key: string; value: string } | null;
}

const HOST_PORT = /^(?:\[([0-9a-fA-F:.]+)\]|([^:\s,]+)):(\d{1,5})$/;

function hostPort(raw: string): { host: string; port: number } {
  const m = HOST_PORT.exec(raw);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port < 1 || port > 65535)
    throw new ConfigError(
      `CAPSULE_RUNNERS: expected host:port[,host:port...] or dns:<name>:<port>, got ${JSON.stringify(raw)}`,
    );
  return { host: (m[1] ?? m[2])!, port };
}

function remoteRunners(env: NodeJS.ProcessEnv): RemoteRunners | null {
  const raw = env.CAPSULE_RUNNERS?.trim();
  const files = ['CAPSULE_RUNNER_CLIENT_CA_FILE', 'CAPSULE_RUNNER_CLIENT_CERT_FILE', 'CAPSULE_RUNNER_CLIENT_KEY_FILE'];
  const only = [...files, 'CAPSULE_RUNNER_HEARTBEAT_MS', 'CAPSULE_RUNNER_LOST_AFTER_MS', 'CAPSULE_PLACEMENT_LABEL'];
  if (!raw) {
    const stray = only.find((f) => env[f]);
    if (stray) throw new ConfigError(`${stray}: only with CAPSULE_RUNNERS`);
    return null;
  }
  let addresses: { host: string; port: number }[] = [];
  let dns: RemoteRunners['dns'] = null;
  if (raw.startsWith('dns:')) {
    const a = hostPort(raw.slice(4));
    dns = { name: a.host, port: a.port };
  } else {
    addresses = raw.split(',').map((p) => hostPort(p.trim()));
    const seen = new Set(addresses.map((a) => `${a.host}:${a.port}`));
    if (seen.size !== addresses.length) throw new ConfigError('CAPSULE_RUNNERS: an address is listed twice');
  }
  const read = (name: string, marker: RegExp): string => {
    const file = env[name];
    if (!file) throw new ConfigError(`${name}: required with CAPSULE_RUNNERS (no plaintext runner over the network)`);
    return readPemFile(name, file, marker);
  };
  const heartbeatMs = intEnv(env, 'CAPSULE_RUNNER_HEARTBEAT_MS', 5000, 100, 600_000);
  const lostAfterMs = intEnv(env, 'CAPSULE_RUNNER_LOST_AFTER_MS', 30_000, 1000, 86_400_000);
  if (lostAfterMs < 2 * heartbeatMs)
    throw new ConfigError('CAPSULE_RUNNER_LOST_AFTER_MS: at least twice CAPSULE_RUNNER_HEARTBEAT_MS');
  const label = env.CAPSULE_PLACEMENT_LABEL;
  const lm = label === undefined ? null : /^([A-Za-z0-9][A-Za-z0-9._/-]{0,62})=([A-Za-z0-9._-]{0,63})$/.exec(label);
  if (label !== undefined && !lm) throw new ConfigError('CAPSULE_PLACEMENT_LABEL: expected key=value');
  return {
    addresses,
    dns,
    tls: {
      ca: read('CAPSULE_RUNNER_CLIENT_CA_FILE', CERT_PEM),
      cert: read('CAPSULE_RUNNER_CLIENT_CERT_FILE', CERT_PEM),
      key: read('CAPSULE_RUNNER_CLIENT_KEY_FILE', KEY_PEM),
    },
    heartbeatMs,
    lostAfterMs,
    affinity: lm ? { key: lm[1]!, value: lm[2]! } : null,
  };
}

function cosignClient(env: NodeJS.ProcessEnv): { certPem: string; keyPem: string } | null {
  const certFile = env.CAPSULE_COSIGN_CLIENT_CERT_FILE;
  const keyFile = env.CAPSULE_COSIGN_CLIENT_KEY_FILE;
  if (!certFile && !keyFile) return null;
  if (!certFile || !keyFile)
    throw new ConfigError('CAPSULE_COSIGN_CLIENT_CERT_FILE and CAPSULE_COSIGN_CLIENT_KEY_FILE: set both or neither');
  return {
    certPem: readPemFile('CAPSULE_COSIGN_CLIENT_CERT_FILE', certFile, CERT_PEM),
    keyPem: readPemFile('CAPSULE_COSIGN_CLIENT_KEY_FILE', keyFile, KEY_PEM),
  };
}

const CERT_PEM = /-----BEGIN CERTIFICATE-----/;
const KEY_PEM = /-----BEGIN (?:[A-Z]+ )?PRIVATE KEY-----/;

/** An operator's PEM file named by setting `name`: read once, refused when unreadable or of the wrong type. */
function readPemFile(name: string, file: string, marker: RegExp): string {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    throw new ConfigError(`${name} (${file}): ${e instanceof Error ? e.message : String(e)}`);
  }
  if (!marker.test(text)) throw new ConfigError(`${name} (${file}): no PEM block of the expected type`);
  return text;
}

/** Billing through Stripe; each part is optional and its endpoint answers 503 naming the missing setting. */
export interface StripeConfig {
  /** CAPSULE_STRIPE_SECRET_KEY[_FILE]. */
  secretKey: string | null;
  /** CAPSULE_STRIPE_WEBHOOK_SECRET[_FILE]. */
  webhookSecret: string | null;
  /** CAPSULE_STRIPE_PRICE_STARTER / _BUSINESS: Stripe price ids of the two self-service tiers. */
  prices: { starter: string | null; business: string | null };
  /** CAPSULE_STRIPE_API_BASE: an http(s)://host:port the SDK calls instead of Stripe. */
  apiBase: URL | null;
  /** CAPSULE_STRIPE_CA_FILE: PEM trust anchor added for the API base. */
  caPem: string | null;
  /** CAPSULE_STRIPE_SUCCESS_URL / _CANCEL_URL; null = under the base URL. */
  successUrl: string | null;
  cancelUrl: string | null;
}

/** Memory bounds of the sealed egress proxies; defaults in DEFAULT_EGRESS_BUDGETS. */
export interface EgressBudgets {
  /** Bytes one capsule's proxy holds for MCP inspection at once (CAPSULE_EGRESS_INSPECT_BYTES_PER_CAPSULE); past it: 429. */
  inspectBytesPerCapsule: number;
  /** Same, for every proxy of the process together (CAPSULE_EGRESS_INSPECT_BYTES_PER_PROCESS). */
  inspectBytesPerProcess: number;
  /** Egress events per capsule handed to the trail and not yet stored (CAPSULE_EGRESS_EVENT_QUEUE); past it: dropped, stated. */
  maxQueuedEvents: number;
}

export const DEFAULT_EGRESS_BUDGETS: EgressBudgets = Object.freeze({
  inspectBytesPerCapsule: 32 * 1024 * 1024,
  inspectBytesPerProcess: 256 * 1024 * 1024,
  maxQueuedEvents: 2048,
});

function egressBudgets(env: NodeJS.ProcessEnv): EgressBudgets {
  const out = { ...DEFAULT_EGRESS_BUDGETS };
  const names: [keyof EgressBudgets, string][] = [
    ['inspectBytesPerCapsule', 'CAPSULE_EGRESS_INSPECT_BYTES_PER_CAPSULE'],
    ['inspectBytesPerProcess', 'CAPSULE_EGRESS_INSPECT_BYTES_PER_PROCESS'],
    ['maxQueuedEvents', 'CAPSULE_EGRESS_EVENT_QUEUE'],
  ];
  for (const [k, name] of names) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const v = Number(raw);
    if (!Number.isSafeInteger(v) || v < 1) throw new ConfigError(`${name}: a positive integer`);
    out[k] = v;
  }
  if (out.inspectBytesPerCapsule > out.inspectBytesPerProcess)
    throw new ConfigError('CAPSULE_EGRESS_INSPECT_BYTES_PER_CAPSULE: at most CAPSULE_EGRESS_INSPECT_BYTES_PER_PROCESS');
  return out;
}

/** The HTTP edge's bounds; defaults in DEFAULT_HTTP_LIMITS, documented in docs/CONTROL_PLANE.md. */
export interface HttpLimits {
  /** Open connections per source address (IPv6: per /64); a connection over it gets a 429 and is closed. */
  maxConnectionsPerIp: number;
  /** Kernel queue of connections not yet accepted (listen backlog; Linux caps it at net.core.somaxconn). */
  listenBacklog: number;
  /** Whole request head must arrive within this (node:http headersTimeout; also bounds a silent new connection). */
  headersTimeoutMs: number;
  /** Whole request (head and body) must arrive within this (node:http requestTimeout). */
  requestTimeoutMs: number;
  /** A request body that sends nothing for this long is refused (400 naming `body`) and the connection closed. */
  bodyIdleTimeoutMs: number;
  /** An idle keep-alive connection is closed after this. */
  keepAliveTimeoutMs: number;
  /** Requests served on one connection before it is closed. */
  maxRequestsPerSocket: number;
  /** Bytes of request line plus headers (node:http maxHeaderSize; over it: 431). */
  maxHeaderBytes: number;
  /** Body bound of POST /v1/verify (a busy capsule's AuditRecord is large). */
  verifyMaxBytes: number;
  /** Verify bodies of all clients together held in memory at once; past it: 503 with Retry-After. */
  verifyInflightBytes: number;
}

export const DEFAULT_HTTP_LIMITS: HttpLimits = Object.freeze({
  maxConnectionsPerIp: 256,
  // A burst of connections beyond the backlog stalls every client's handshake for a SYN-ACK retransmit (1 s+).
  listenBacklog: 4096,
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 300_000,
  bodyIdleTimeoutMs: 15_000,
  // Longer than clients' idle keep-alive (undici: 4 s), so a client never reuses a socket we just closed.
  keepAliveTimeoutMs: 65_000,
  maxRequestsPerSocket: 1000,
  maxHeaderBytes: 16 * 1024,
  verifyMaxBytes: 16 * 1024 * 1024,
  verifyInflightBytes: 64 * 1024 * 1024,
});

const HTTP_ENV: Record<keyof HttpLimits, [string, number]> = {
  maxConnectionsPerIp: ['CAPSULE_HTTP_MAX_CONNECTIONS_PER_IP', 1],
  listenBacklog: ['CAPSULE_HTTP_LISTEN_BACKLOG', 1],
  headersTimeoutMs: ['CAPSULE_HTTP_HEADERS_TIMEOUT_MS', 100],
  requestTimeoutMs: ['CAPSULE_HTTP_REQUEST_TIMEOUT_MS', 100],
  bodyIdleTimeoutMs: ['CAPSULE_HTTP_BODY_IDLE_TIMEOUT_MS', 100],
  keepAliveTimeoutMs: ['CAPSULE_HTTP_KEEP_ALIVE_TIMEOUT_MS', 100],
  maxRequestsPerSocket: ['CAPSULE_HTTP_MAX_REQUESTS_PER_SOCKET', 1],
  maxHeaderBytes: ['CAPSULE_HTTP_MAX_HEADER_BYTES', 1024],
  verifyMaxBytes: ['CAPSULE_VERIFY_MAX_BYTES', 1024],
  verifyInflightBytes: ['CAPSULE_VERIFY_INFLIGHT_BYTES', 1024],
};

function httpLimits(env: NodeJS.ProcessEnv): HttpLimits {
  const out = { ...DEFAULT_HTTP_LIMITS };
  for (const [k, [name, min]] of Object.entries(HTTP_ENV) as [keyof HttpLimits, [string, number]][]) {
    const raw = env[name];
    if (raw === undefined || raw === '') continue;
    const v = Number(raw);
    if (!Number.isSafeInteger(v) || v < min) throw new ConfigError(`${name}: an integer of at least ${min}`);
    out[k] = v;
  }
  // node:http refuses a head timeout longer than the whole-request timeout.
  if (out.headersTimeoutMs > out.requestTimeoutMs)
    throw new ConfigError('CAPSULE_HTTP_HEADERS_TIMEOUT_MS: at most CAPSULE_HTTP_REQUEST_TIMEOUT_MS');
  if (out.verifyMaxBytes > out.verifyInflightBytes)
    throw new ConfigError('CAPSULE_VERIFY_MAX_BYTES: at most CAPSULE_VERIFY_INFLIGHT_BYTES');
  return out;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const policy = (name: string): string => resolve(repoRoot, 'policies', name);

// Integers only (SPEC `limits`); the counters they bound are 32-bit database integers.
const count = z
  .number()
  .int()
  .positive()
  .max(2 ** 31 - 1);
const tierRow = z.strictObject({
  capsules_per_month: count,
  max_ttl_seconds: count,
  concurrent_capsules: count,
  rate_limit_rpm: count,
  upload_max_bytes: z.number().int().positive().max(Number.MAX_SAFE_INTEGER),
});
const tierTable = z.strictObject({ starter: tierRow, business: tierRow, enterprise: tierRow });

const decimal = z.string().refine((v) => toMicros(v) !== null, 'a decimal string with at most 6 places');
const tierPrice = z.strictObject({
  base_fee: decimal,
  metered: z.strictObject(
    Object.fromEntries(
      METERED.map((m) => [m, z.strictObject({ included: z.number().int().min(0), unit_price: decimal })]),
    ) as Record<(typeof METERED)[number], z.ZodObject<{ included: z.ZodNumber; unit_price: typeof decimal }>>,
  ),
});
const priceFile = z.strictObject({
  currency: z.string().regex(/^[a-z]{3}$/, 'an ISO 4217 code in lower case'),
  tiers: z.strictObject(
    Object.fromEntries(TIERS.map((t) => [t, tierPrice])) as Record<(typeof TIERS)[number], typeof tierPrice>,
  ),
});

function loadPrices(file: string): PriceTable {
  let raw: z.infer<typeof priceFile>;
  try {
    raw = priceFile.parse(parseYaml(readFileSync(file, 'utf8')));
  } catch (e) {
    const msg =
      e instanceof z.ZodError
        ? `${e.issues[0]?.path.join('.')}: ${e.issues[0]?.message}`
        : e instanceof Error
          ? e.message.split('\n')[0]
          : String(e);
    throw new ConfigError(`CAPSULE_PRICES_FILE (${file}): ${msg}`);
  }
  const micros = (v: string): number => toMicros(v) as number;
  const tiers = Object.fromEntries(
    TIERS.map((t) => {
      const p = raw.tiers[t];
      const metered = Object.fromEntries(
        METERED.map((m) => [m, { included: p.metered[m].included, unit_price: micros(p.metered[m].unit_price) }]),
      );
      return [t, { base_fee: micros(p.base_fee), metered }];
    }),
  ) as PriceTable['tiers'];
  return { currency: raw.currency, tiers };
}

function stripeConfig(env: NodeJS.ProcessEnv): StripeConfig {
  let apiBase: URL | null = null;
  const base = env.CAPSULE_STRIPE_API_BASE;
  if (base) {
    try {
      apiBase = new URL(base);
    } catch {
      apiBase = null;
    }
    if (!apiBase || !/^https?:$/.test(apiBase.protocol) || (apiBase.pathname !== '/' && apiBase.pathname !== ''))
      throw new ConfigError(`CAPSULE_STRIPE_API_BASE: expected http(s)://host[:port], got "${base}"`);
  }
  let caPem: string | null = null;
  if (env.CAPSULE_STRIPE_CA_FILE) {
    try {
      caPem = readFileSync(env.CAPSULE_STRIPE_CA_FILE, 'utf8');
    } catch (e) {
      throw new ConfigError(`CAPSULE_STRIPE_CA_FILE: ${e instanceof Error ? e.message : String(e)}`);
    }
    if (!caPem.includes('-----BEGIN CERTIFICATE-----'))
      throw new ConfigError(`CAPSULE_STRIPE_CA_FILE (${env.CAPSULE_STRIPE_CA_FILE}): no PEM certificate in the file`);
  }
  const url = (name: string): string | null => {
    const v = env[name];
    if (!v) return null;
    if (!/^https?:\/\/\S+$/.test(v)) throw new ConfigError(`${name}: expected an http(s) URL`);
    return v;
  };
  return {
    secretKey: secret(env, 'CAPSULE_STRIPE_SECRET_KEY') ?? null,
    webhookSecret: secret(env, 'CAPSULE_STRIPE_WEBHOOK_SECRET') ?? null,
    prices: {
      starter: env.CAPSULE_STRIPE_PRICE_STARTER || null,
      business: env.CAPSULE_STRIPE_PRICE_BUSINESS || null,
    },
    apiBase,
    caPem,
    successUrl: url('CAPSULE_STRIPE_SUCCESS_URL'),
    cancelUrl: url('CAPSULE_STRIPE_CANCEL_URL'),
  };
}

/** Reads `NAME` or, for secrets, the file named by `NAME_FILE`. */
function secret(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const file = env[`${name}_FILE`];
  if (file) return readFileSync(file, 'utf8').trim();
  return env[name] || undefined;
}

function bool(v: string | undefined, dflt: boolean): boolean {
  if (v === undefined || v === '') return dflt;
  if (/^(1|true|on|yes)$/i.test(v)) return true;
  if (/^(0|false|off|no)$/i.test(v)) return false;
  throw new ConfigError(`expected a boolean, got "${v}"`);
}

export interface ConfigOverrides {
  port?: number;
  dataDir?: string;
  runnerSocket?: string | null;
  databaseUrl?: string;
}

export function loadConfig(env: NodeJS.ProcessEnv, over: ConfigOverrides = {}): Config {
  const portRaw = over.port ?? (env.PORT ? Number(env.PORT) : 8080);
  if (!Number.isInteger(portRaw) || portRaw < 0 || portRaw > 65535)
    throw new ConfigError(`PORT: not a port number: ${String(env.PORT)}`);
  const dataDir = resolve(over.dataDir ?? env.CAPSULE_DATA_DIR ?? './data');
  const url = over.databaseUrl ?? secret(env, 'DATABASE_URL');
  const sync = (env.CAPSULE_SQLITE_SYNCHRONOUS ?? 'normal').toLowerCase();
  if (sync !== 'full' && sync !== 'normal') throw new ConfigError('CAPSULE_SQLITE_SYNCHRONOUS: full or normal');
  let database: DatabaseConfig;
  if (url && /^postgres(ql)?:\/\//.test(url)) database = { driver: 'postgresql', url };
  else if (url && url.startsWith('file:'))
    database = { driver: 'sqlite', file: resolve(url.slice(5)), synchronous: sync };
  else if (url) throw new ConfigError('DATABASE_URL: expected postgres://... or file:<path>');
  else database = { driver: 'sqlite', file: resolve(dataDir, 'capsule.db'), synchronous: sync };

  const tiersFile = env.CAPSULE_TIERS_FILE ?? policy('tiers.yaml');
  let paid: PaidTierTable;
  try {
    paid = tierTable.parse(parseYaml(readFileSync(tiersFile, 'utf8')));
  } catch (e) {
    throw new ConfigError(
      `CAPSULE_TIERS_FILE (${tiersFile}): ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`,
    );
  }
  for (const [tier, row] of Object.entries(paid))
    if (row.upload_max_bytes < FREE_LIMITS.upload_max_bytes)
      throw new ConfigError(
        `CAPSULE_TIERS_FILE (${tiersFile}): ${tier}.upload_max_bytes: at least Free's ${FREE_LIMITS.upload_max_bytes}`,
      );
  const cfLimitsFile = env.CAPSULE_CAPSULEFILE_LIMITS_FILE ?? policy('capsulefile-tier-limits.yaml');
  let capsulefileLimits: Config['capsulefileLimits'];
  try {
    const row = z.strictObject({
      max_memory_mb: z
        .number()
        .int()
        .min(16)
        .max(1024 * 1024),
      max_capsulefiles: z.number().int().positive().nullable(),
    });
    capsulefileLimits = z
      .strictObject({ free: row, starter: row, business: row, enterprise: row })
      .parse(parseYaml(readFileSync(cfLimitsFile, 'utf8')));
  } catch (e) {
    throw new ConfigError(
      `CAPSULE_CAPSULEFILE_LIMITS_FILE (${cfLimitsFile}): ${e instanceof Error ? e.message.split('\n')[0] : String(e)}`,
    );
  }
  let egressExtraCaPem: string | null = null;
  if (env.CAPSULE_EGRESS_EXTRA_CA) {
    try {
      egressExtraCaPem = readFileSync(env.CAPSULE_EGRESS_EXTRA_CA, 'utf8');
    } catch (e) {
      throw new ConfigError(
        `CAPSULE_EGRESS_EXTRA_CA (${env.CAPSULE_EGRESS_EXTRA_CA}): ${e instanceof Error ? e.message : String(e)}`,
      );
    }
    if (!egressExtraCaPem.includes('-----BEGIN CERTIFICATE-----'))
      throw new ConfigError(`CAPSULE_EGRESS_EXTRA_CA (${env.CAPSULE_EGRESS_EXTRA_CA}): no PEM certificate in the file`);
  }
  // A Unix socket path is limited to 107 bytes; leave room for "/cap_<24 hex>.sock".
  const SOCKET_DIR_MAX = 70;
  let egressSocketDir: string;
  if (env.CAPSULE_EGRESS_SOCKET_DIR) {
    egressSocketDir = resolve(env.CAPSULE_EGRESS_SOCKET_DIR);
    if (egressSocketDir.length > SOCKET_DIR_MAX)
      throw new ConfigError(
        `CAPSULE_EGRESS_SOCKET_DIR (${egressSocketDir}): at most ${SOCKET_DIR_MAX} characters (Unix socket path limit)`,
      );
  } else {
    egressSocketDir = resolve(dataDir, 'egress');
    // A deep data dir would not fit: fall back to a short per-data-dir directory under /tmp (created 0700).
    if (egressSocketDir.length > SOCKET_DIR_MAX)
      egressSocketDir = `/tmp/capsule-egress-${createHash('sha256').update(dataDir).digest('hex').slice(0, 16)}`;
  }
  // Secrets at rest are sealed under the operator's master key. Only the embedded
  // SQLite default may generate one (in its data dir); PostgreSQL installs supply it.
  // The server refuses to start without one (requireMasterKey); admin commands do not need it.
  let masterKey: MasterKeyConfig | null = null;
  if (env.CAPSULE_MASTER_KEY)
    throw new ConfigError('CAPSULE_MASTER_KEY: not accepted inline; use CAPSULE_MASTER_KEY_FILE');
  if (env.CAPSULE_MASTER_KEY_FILE) masterKey = { file: resolve(env.CAPSULE_MASTER_KEY_FILE), generateIfMissing: false };
  else if (database.driver === 'sqlite') masterKey = { file: resolve(dataDir, 'master.key'), generateIfMissing: true };
  const procSwaps = env.CAPSULE_PROC_SWAPS ? resolve(env.CAPSULE_PROC_SWAPS) : PROC_SWAPS;
  if (procSwaps !== PROC_SWAPS && !existsSync(procSwaps))
    throw new ConfigError(`CAPSULE_PROC_SWAPS: no such file ${procSwaps}`);
  const port = portRaw;
  const baseUrl = env.CAPSULE_BASE_URL ? env.CAPSULE_BASE_URL.replace(/\/$/, '') : null;
  const sweep = Number(env.CAPSULE_SWEEP_INTERVAL_MS ?? 1000);
  if (!Number.isFinite(sweep) || sweep < 50) throw new ConfigError('CAPSULE_SWEEP_INTERVAL_MS: at least 50');
  const maxActivity = Number(env.CAPSULE_MAX_ACTIVITY_EVENTS ?? DEFAULT_MAX_ACTIVITY_EVENTS);
  if (!Number.isSafeInteger(maxActivity) || maxActivity < 10 || maxActivity > 10_000_000)
    throw new ConfigError('CAPSULE_MAX_ACTIVITY_EVENTS: an integer in 10..10000000');
  const upload = env.CAPSULE_UPLOAD_MAX_BYTES ? Number(env.CAPSULE_UPLOAD_MAX_BYTES) : null;
  if (upload !== null && (!Number.isSafeInteger(upload) || upload < 1))
    throw new ConfigError('CAPSULE_UPLOAD_MAX_BYTES: a positive integer');
  return {
    host: env.CAPSULE_HOST ?? '127.0.0.1',
    port,
    dataDir,
    database,
    runnerSocket: over.runnerSocket !== undefined ? over.runnerSocket : env.CAPSULE_RUNNER_SOCKET || null,
    remoteRunners: remoteRunners(env),
    metricsToken: env.CAPSULE_METRICS_TOKEN || null,
    shutdownGraceMs: intEnv(env, 'CAPSULE_SHUTDOWN_GRACE_MS', 20_000, 0, 600_000),
    baseUrl,
    docsUrl: env.CAPSULE_DOCS_URL ? env.CAPSULE_DOCS_URL.replace(/\/$/, '') : null,
    region: env.CAPSULE_REGION ?? 'local',
    rateLimits: bool(env.CAPSULE_RATE_LIMITS, true),
    sweepIntervalMs: sweep,
    maxActivityEvents: maxActivity,
    uploadMaxBytes: upload,
    http: httpLimits(env),
    paidTiers: paid,
    regulatoryMappingFile: env.CAPSULE_REGULATORY_MAPPING ?? policy('regulatory-mapping.yaml'),
    logLevel: env.LOG_LEVEL ?? 'info',
    version: env.npm_package_version ?? '0.1.0',
    systemCapsulefilesDir: env.CAPSULE_SYSTEM_CAPSULEFILES_DIR ?? policy('system-capsulefiles'),
    egressExtraCaPem,
    egressSocketDir,
    egressBudgets: egressBudgets(env),
    capsulefileLimits,
    masterKey,
    procSwaps,
    prices: loadPrices(env.CAPSULE_PRICES_FILE ?? policy('prices.yaml')),
    stripe: stripeConfig(env),
    signing: signingConfig(env),
    webhooks: webhookConfig(env),
    fairGate: fairGateConfig(env),
  };
}

/** The master key setting the server needs; a PostgreSQL install without one does not start. */
export function requireMasterKey(c: Config): MasterKeyConfig {
  if (c.masterKey) return c.masterKey;
  throw new ConfigError(
    'CAPSULE_MASTER_KEY_FILE: required with PostgreSQL (a file holding 32 random bytes as base64 or hex, e.g. from `openssl rand -base64 32`); the install never generates secrets',
  );
}

/** `loadConfig` over this process's environment (the CLI's entry). */
export function loadConfigFromProcess(over: ConfigOverrides = {}): Config {
  return loadConfig(process.env, over);
}
