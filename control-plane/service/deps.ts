// What every service receives: ports only, injected at start.
import type { CryptoProvider } from '../../shared/proof/index.js';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import type { BaseImage, CapsulefileStore } from '../capsulefile/index.js';
import type {
  BillingStore,
  CheckoutPort,
  Clock,
  EgressLauncher,
  EgressProfileStore,
  KeyStore,
  PriceTable,
  PurchasableTier,
  RunnerRegistry,
  ServiceMetrics,
  Random,
  SecretBox,
  SignerPort,
  CosignPort,
  Store,
  Tier,
  TierTable,
  UsageStore,
  WebhookSender,
  WebhookStore,
  WebhookVerifier,
} from '../domain/index.js';
import type { RegulatoryMapping } from './regulatory.js';

/** The subset of a pino logger the services use. */
export interface Log {
  info(obj: object, msg?: string): void;
  warn(obj: object, msg?: string): void;
  error(obj: object, msg?: string): void;
}

/** Self-service billing through the payment processor; a null part answers 503 naming `missing`. */
export interface BillingDeps {
  checkout: CheckoutPort | null;
  webhooks: WebhookVerifier | null;
  /** Processor price id per purchasable tier (unset: that tier answers 503). */
  prices: Partial<Record<PurchasableTier, string>>;
  successUrl: string;
  cancelUrl: string;
}

/** Webhook endpoints and delivery (docs/WEBHOOKS.md). */
export interface WebhookDeps {
  store: WebhookStore;
  sender: WebhookSender;
  /** Loopback/private receivers and plain http accepted (development, tests, self-hosted). */
  allowPrivate: boolean;
  timeoutMs: number;
  /** Attempts in flight in this process; 0 = this process does not run the delivery worker. */
  concurrency: number;
  /** Attempts in flight to one endpoint from this process. */
  perEndpoint: number;
  pollMs: number;
  /** Public base URL (verify links in payloads); filled in once the listener is up. */
  baseUrl: { value: string };
  /** Wakes the delivery worker after an event committed (set by buildServices). */
  kick?: () => void;
}

export interface Deps {
  store: Store;
  keys: KeyStore;
  usage: UsageStore;
  billingStore: BillingStore;
  billing: BillingDeps;
  /** Price table of the usage estimate (policies/prices.yaml). */
  prices: PriceTable;
  capsulefiles: CapsulefileStore;
  egressProfiles: EgressProfileStore;
  /** Seals and opens secrets stored at rest (under the operator's master key). */
  secrets: SecretBox;
  webhooks: WebhookDeps;
  /** Starts a capsule's sealed egress layer; null = this install serves no egress (profiles give 503 at capsule create). */
  egress: EgressLauncher | null;
  /** Answers which declared Capsulefile packages the capsule base image lacks. */
  baseImage: BaseImage;
  /** Per-tier Capsulefile limits: memory ceiling of a pinned capsule, Capsulefile count. */
  capsulefileLimits: Record<Tier, { max_memory_mb: number; max_capsulefiles: number | null }>;
  runner: RunnerPort;
  /** Operator metrics of the services (proof signing); absent in tests that do not look. */
  metrics?: ServiceMetrics;
  /** Where capsules run and which runners are live (several runners); null with one local runner. */
  runnerRegistry?: RunnerRegistry | null;
  /** A runner no control plane reached for this long is declared lost (CAPSULE_RUNNER_LOST_AFTER_MS). */
  runnerLostAfterMs?: number;
  clock: Clock;
  random: Random;
  tiers: TierTable;
  regulatory: RegulatoryMapping;
  region: string;
  /** Cap of one capsule's activity trail (default 10,000): past it events are counted as dropped, not stored. */
  maxActivityEvents?: number;
  log: Log;
  /** Managed signing authority; absent = a fresh ephemeral key per proof. */
  signer?: SignerPort | null;
  /** Customer co-signing of activity events (Capsulefile `signing_config`); absent = not offered. */
  cosign?: CosignPort | null;
  /** Hash/verify provider for proof verification (default: the library's isomorphic one). */
  proofCrypto?: CryptoProvider;
}
