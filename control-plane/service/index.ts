// Public entry of the service layer.
import { withCosigning } from './cosigning.js';
import { AccountService } from './accounts.js';
import { KeyService } from './api-keys.js';
import { BillingService } from './billing.js';
import { MfaService } from './mfa.js';
import { UsageService } from './usage.js';
import { CapsulefileService } from './capsulefiles.js';
import { CapsuleService, LiveState } from './capsules.js';
import type { Deps } from './deps.js';
import { DestructionService } from './destruction.js';
import { EgressProfileService } from './egress-profiles.js';
import { EgressSessions } from './egress-sessions.js';
import { ProofService } from './proofs.js';
import { recover, RecoveryGate } from './recovery.js';
import { Sweeper } from './sweeper.js';
import { Retries } from './retries.js';
import { WebhookService } from './webhooks.js';
import { WebhookWorker } from './webhook-worker.js';

export type { BillingDeps, Deps, Log, WebhookDeps } from './deps.js';
export { WEBHOOK_ID_HEADER } from './webhook-worker.js';
export { webhookSecretContext } from './webhooks.js';
export { ITEM_FIELDS, itemRow, itemView } from './usage.js';
export { issueKey } from './api-keys.js';
export { systemClock, systemRandom, isoMicros, cycleStart } from './clock.js';
export { parseRegulatoryMapping, regulatoryContext, type RegulatoryMapping } from './regulatory.js';
export { publicLimits, SIGNUP_WARNING } from './accounts.js';
export { API_KEY_RE, hashApiKey, sha512Prefixed, newId } from './ids.js';
export type { RecoveryReport } from './recovery.js';
export { RecoveryGate } from './recovery.js';
export type { DestroyTrigger } from './destruction.js';
export { DEFAULT_TTL_SECONDS } from './capsules.js';
export type { CapsulefileDetail } from './capsulefiles.js';

export interface Services {
  accounts: AccountService;
  capsules: CapsuleService;
  capsulefiles: CapsulefileService;
  destruction: DestructionService;
  proofs: ProofService;
  sweeper: Sweeper;
  recovery: RecoveryGate;
  egressProfiles: EgressProfileService;
  /** Running sealed egress layers (stopAll at shutdown). */
  egress: EgressSessions;
  keys: KeyService;
  mfa: MfaService;
  usage: UsageService;
  billing: BillingService;
  webhooks: WebhookService;
  /** Delivers the outbox (start/stop with the server). */
  webhookWorker: WebhookWorker;
}

export function buildServices(deps: Deps, sweepIntervalMs: number): Services {
  const d: Deps = deps.cosign ? { ...deps, store: withCosigning(deps.store, deps.cosign) } : deps;
  const webhookWorker = new WebhookWorker(d);
  d.webhooks.kick = () => webhookWorker.kick();
  const webhooks = new WebhookService(d);
  webhooks.attach(webhookWorker);
  const live = new LiveState();
  const egress = new EgressSessions(d);
  const egressProfiles = new EgressProfileService(d);
  const destruction = new DestructionService(d, live, egress);
  const retries = new Retries(d.clock);
  const recovery = new RecoveryGate(() => recover(d, destruction, live.creating, retries), d.log);
  const capsulefiles = new CapsulefileService(d);
  return {
    accounts: new AccountService(d),
    capsules: new CapsuleService(d, live, recovery, capsulefiles, egressProfiles, egress),
    capsulefiles,
    destruction,
    proofs: new ProofService(d),
    sweeper: new Sweeper(d, destruction, sweepIntervalMs, recovery, retries),
    recovery,
    egressProfiles,
    egress,
    keys: new KeyService(d),
    mfa: new MfaService(d),
    usage: new UsageService(d),
    billing: new BillingService(d),
    webhooks,
    webhookWorker,
  };
}
export { emitLegacySessionProof } from './legacy-proof.js';
