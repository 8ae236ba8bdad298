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
  Random,
  SecretBox,
  SignerPort,
  Store,
  Tier,
  TierTable,
  UsageStore,
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
  /** Starts a capsule's sealed egress layer; null = this install serves no egress (profiles give 503 at capsule create). */
  egress: EgressLauncher | null;
  /** Answers which declared Capsulefile packages the capsule base image lacks. */
  baseImage: BaseImage;
  /** Per-tier Capsulefile limits: memory ceiling of a pinned capsule, Capsulefile count. */
  capsulefileLimits: Record<Tier, { max_memory_mb: number; max_capsulefiles: number | null }>;
  runner: RunnerPort;
  clock: Clock;
  random: Random;
  tiers: TierTable;
  regulatory: RegulatoryMapping;
  region: string;
  log: Log;
  /** Managed signing authority; absent = a fresh ephemeral key per proof. */
  signer?: SignerPort | null;
  /** Hash/verify provider for proof verification (default: the library's isomorphic one). */
  proofCrypto?: CryptoProvider;
}
