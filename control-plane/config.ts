// The one place that reads process.env: read once at start into a typed,
// validated object. Everything else receives a Config.
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parse as parseYaml } from 'yaml';
import { z } from 'zod';
import type { PaidTierTable, PriceTable } from './domain/index.js';
import { METERED, toMicros, TIERS } from './domain/index.js';

export type DatabaseConfig =
  { driver: 'sqlite'; file: string; synchronous: 'full' | 'normal' } | { driver: 'postgresql'; url: string };

/** Where the master key lives; generateIfMissing only for the embedded SQLite default. */
export interface MasterKeyConfig {
  file: string;
  generateIfMissing: boolean;
}

export interface Config {
  host: string;
  port: number;
  dataDir: string;
  database: DatabaseConfig;
  /** Unix socket of a separately started runner; null = `capsule serve` spawns one. */
  runnerSocket: string | null;
  /** Public base URL; null = derived from the listening address at start. */
  baseUrl: string | null;
  /** Error docs root (`{docs_url}/errors/<code>`); null = `{base_url}/docs`. */
  docsUrl: string | null;
  region: string;
  /** Per-IP and per-customer limits; only benchmarks turn them off. */
  rateLimits: boolean;
  sweepIntervalMs: number;
  /** Bound on one upload body (the runner has its own bound too). */
  uploadMaxBytes: number;
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
  /** Per-tier Capsulefile limits (policies/capsulefile-tier-limits.yaml). */
  capsulefileLimits: Record<
    'free' | 'starter' | 'business' | 'enterprise',
    { max_memory_mb: number; max_capsulefiles: number | null }
  >;
  /** The key that seals secrets at rest (CAPSULE_MASTER_KEY_FILE; embedded default: <dataDir>/master.key); null = not configured. */
  masterKey: MasterKeyConfig | null;
  /** Price table of the usage estimate (CAPSULE_PRICES_FILE, default policies/prices.yaml). */
  prices: PriceTable;
  stripe: StripeConfig;
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

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const repoRoot = fileURLToPath(new URL('../../', import.meta.url));
const policy = (name: string): string => resolve(repoRoot, 'policies', name);

const tierRow = z.strictObject({
  capsules_per_month: z.number().int().positive().nullable(),
  max_ttl_seconds: z.number().int().positive(),
  concurrent_capsules: z.number().int().positive().nullable(),
  rate_limit_rpm: z.number().int().positive(),
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
  const port = portRaw;
  const baseUrl = env.CAPSULE_BASE_URL ? env.CAPSULE_BASE_URL.replace(/\/$/, '') : null;
  const sweep = Number(env.CAPSULE_SWEEP_INTERVAL_MS ?? 1000);
  if (!Number.isFinite(sweep) || sweep < 50) throw new ConfigError('CAPSULE_SWEEP_INTERVAL_MS: at least 50');
  const upload = Number(env.CAPSULE_UPLOAD_MAX_BYTES ?? 64 * 1024 * 1024);
  if (!Number.isInteger(upload) || upload < 1) throw new ConfigError('CAPSULE_UPLOAD_MAX_BYTES: a positive integer');
  return {
    host: env.CAPSULE_HOST ?? '127.0.0.1',
    port,
    dataDir,
    database,
    runnerSocket: over.runnerSocket !== undefined ? over.runnerSocket : env.CAPSULE_RUNNER_SOCKET || null,
    baseUrl,
    docsUrl: env.CAPSULE_DOCS_URL ? env.CAPSULE_DOCS_URL.replace(/\/$/, '') : null,
    region: env.CAPSULE_REGION ?? 'local',
    rateLimits: bool(env.CAPSULE_RATE_LIMITS, true),
    sweepIntervalMs: sweep,
    uploadMaxBytes: upload,
    paidTiers: paid,
    regulatoryMappingFile: env.CAPSULE_REGULATORY_MAPPING ?? policy('regulatory-mapping.yaml'),
    logLevel: env.LOG_LEVEL ?? 'info',
    version: env.npm_package_version ?? '0.1.0',
    systemCapsulefilesDir: env.CAPSULE_SYSTEM_CAPSULEFILES_DIR ?? policy('system-capsulefiles'),
    egressExtraCaPem,
    egressSocketDir,
    capsulefileLimits,
    masterKey,
    prices: loadPrices(env.CAPSULE_PRICES_FILE ?? policy('prices.yaml')),
    stripe: stripeConfig(env),
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
