// Customer co-signing of activity events (Capsulefile `signing_config`,
// docs/PROOF_FORMAT.md "Customer co-signatures"): one POST of each event's
// canonical hash to the customer's signer over mutual TLS (the operator's
// client certificate; the customer's CA checks the signer), fire-and-buffer.
// Calls go through the webhook sender, so the same SSRF rules hold. Bounded:
// per-capsule and process queues and concurrency, one deadline per call, at
// most 1 KB of an answer kept; a slow, failing or hostile signer only turns
// its own capsule's slots into `missing`, never blocks a capsule or another tenant.
import type { KeyObject } from 'node:crypto';
import { eventHash, type ActivityEvent, type CustomerAttestation } from '../../shared/proof/index.js';
import { nodeCrypto } from '../../shared/node/crypto-node.js';
import { customerKey, verifyCustomerSignature } from '../../shared/node/customer-signature.js';
import type { CosignConfig, CosignPort } from '../domain/index.js';
import { HttpsWebhookSender, type WebhookResolver } from './sender.js';

export interface CosignerOptions {
  /** Loopback and private signers allowed (tests, self-hosted); the webhook rule. */
  allowPrivate: boolean;
  clientCertPem: string | null;
  clientKeyPem: string | null;
  timeoutMs?: number;
  perCapsuleConcurrency?: number;
  maxConcurrency?: number;
  maxQueuedPerCapsule?: number;
  maxQueued?: number;
  /** How long `collect` waits for answers still due before it counts them missing. */
  collectGraceMs?: number;
  resolver?: WebhookResolver;
  log?: (fields: Record<string, unknown>, msg: string) => void;
}

interface Pending {
  seq: number;
  type: string;
  hash: string;
}

interface Session {
  capsuleId: string;
  config: CosignConfig;
  sender: HttpsWebhookSender;
  key: KeyObject | null;
  results: Map<number, CustomerAttestation>;
  queue: Pending[];
  /** Calls under way: counted missing if `collect` stops waiting for them. */
  running: Map<number, string>;
  inflight: number;
  closed: boolean;
  /** One log line per capsule for the first failure; the count at collect (a hostile signer cannot flood logs). */
  failures: number;
  idle: (() => void)[];
}

const SIGNATURE_MAX_B64 = 1024;

export class HttpsCosigner implements CosignPort {
  private readonly sessions = new Map<string, Session>();
  private inflight = 0;
  private queued = 0;
  private readonly o: Required<Omit<CosignerOptions, 'resolver' | 'log'>> & Pick<CosignerOptions, 'resolver' | 'log'>;

  constructor(options: CosignerOptions) {
    this.o = {
      timeoutMs: 5000,
      perCapsuleConcurrency: 2,
      maxConcurrency: 16,
      maxQueuedPerCapsule: 10_000,
      maxQueued: 100_000,
      collectGraceMs: 2000,
      ...options,
    };
  }

  open(capsuleId: string, config: CosignConfig): void {
    if (this.sessions.has(capsuleId)) return;
    const parsed = customerKey(config.public_key);
    const key = parsed && parsed.algorithm === config.algorithm ? parsed.key : null;
    if (!key) this.o.log?.({ capsule_id: capsuleId }, 'cosign: public_key does not parse as the declared algorithm');
    const sender = new HttpsWebhookSender({
      allowPrivate: this.o.allowPrivate,
      extraCaPem: null,
      maxSocketsPerHost: this.o.perCapsuleConcurrency,
      ...(config.ca_cert ? { caPem: config.ca_cert } : {}),
      ...(this.o.clientCertPem && this.o.clientKeyPem
        ? { clientCertPem: this.o.clientCertPem, clientKeyPem: this.o.clientKeyPem }
        : {}),
      ...(this.o.resolver ? { resolver: this.o.resolver } : {}),
    });
    this.sessions.set(capsuleId, {
      capsuleId,
      config,
      sender,
      key,
      results: new Map(),
      queue: [],
      running: new Map(),
      inflight: 0,
      closed: false,
      failures: 0,
      idle: [],
    });
  }

  isOpen(capsuleId: string): boolean {
    return this.sessions.has(capsuleId);
  }

  submit(capsuleId: string, event: ActivityEvent): void {
    const s = this.sessions.get(capsuleId);
    if (!s || s.closed) return;
    const hash = eventHash(event, nodeCrypto);
    if (!s.key || s.queue.length >= this.o.maxQueuedPerCapsule || this.queued >= this.o.maxQueued) {
      s.results.set(event.seq, { seq: event.seq, event_hash: hash, status: 'missing' });
      return;
    }
    s.queue.push({ seq: event.seq, type: event.type, hash });
    this.queued++;
    this.pump();
  }

  async collect(capsuleId: string): Promise<CustomerAttestation[] | null> {
    const s = this.sessions.get(capsuleId);
    if (!s) return null;
    if (s.queue.length > 0 || s.inflight > 0) {
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, this.o.collectGraceMs);
        s.idle.push(() => {
          clearTimeout(timer);
          resolve();
        });
      });
    }
    s.closed = true;
    this.sessions.delete(capsuleId);
    for (const p of s.queue) s.results.set(p.seq, { seq: p.seq, event_hash: p.hash, status: 'missing' });
    for (const [seq, hash] of s.running) s.results.set(seq, { seq, event_hash: hash, status: 'missing' });
    this.queued -= s.queue.length;
    s.queue = [];
    s.sender.close();
    const out = [...s.results.values()].sort((a, b) => a.seq - b.seq);
    const missing = out.filter((a) => 'status' in a).length;
    if (missing > 0)
      this.o.log?.({ capsule_id: capsuleId, missing, events: out.length }, 'cosign: events without a signature');
    return out;
  }

  close(): void {
    for (const s of this.sessions.values()) {
      s.closed = true;
      s.sender.close();
    }
    this.sessions.clear();
  }

  /** Starts calls while there is room, taking capsules in turn so one busy capsule cannot starve others. */
  private pump(): void {
    let started = true;
    while (started && this.inflight < this.o.maxConcurrency) {
      started = false;
      for (const s of this.sessions.values()) {
        if (this.inflight >= this.o.maxConcurrency) break;
        if (s.closed || s.queue.length === 0 || s.inflight >= this.o.perCapsuleConcurrency) continue;
        const p = s.queue.shift()!;
        this.queued--;
        s.inflight++;
        s.running.set(p.seq, p.hash);
        this.inflight++;
        started = true;
        void this.call(s, p).finally(() => {
          s.running.delete(p.seq);
          s.inflight--;
          this.inflight--;
          if (s.queue.length === 0 && s.inflight === 0) for (const f of s.idle.splice(0)) f();
          this.pump();
        });
      }
    }
  }

  private async call(s: Session, p: Pending): Promise<void> {
    const missing = (why: string): void => {
      if (!s.closed) s.results.set(p.seq, { seq: p.seq, event_hash: p.hash, status: 'missing' });
      if (s.failures++ === 0)
        this.o.log?.({ capsule_id: s.capsuleId, seq: p.seq, reason: why }, 'cosign: no signature for an event');
    };
    const body = JSON.stringify({
      capsule_id: s.capsuleId,
      seq: p.seq,
      event_type: p.type,
      event_hash: p.hash,
      algorithm: s.config.algorithm,
    });
    const r = await s.sender.send(
      s.config.endpoint,
      { 'content-type': 'application/json', accept: 'application/json' },
      body,
      this.o.timeoutMs,
    );
    if (r.error !== null) return missing(r.error);
    if (r.status !== 200) return missing(`HTTP ${r.status}`);
    let signature: unknown;
    try {
      signature = (JSON.parse(r.body ?? '') as { signature?: unknown }).signature;
    } catch {
      return missing('answer is not JSON');
    }
    if (
      typeof signature !== 'string' ||
      signature.length > SIGNATURE_MAX_B64 ||
      !/^[A-Za-z0-9+/]+={0,2}$/.test(signature)
    )
      return missing('no base64 signature in the answer');
    if (!this.verifies(s, p.hash, Buffer.from(signature, 'base64'))) return missing('signature does not verify');
    if (!s.closed) s.results.set(p.seq, { seq: p.seq, event_hash: p.hash, algorithm: s.config.algorithm, signature });
  }

  private verifies(s: Session, hash: string, sig: Buffer): boolean {
    if (!s.key) return false;
    return verifyCustomerSignature(s.config.algorithm, s.key, Buffer.from(hash, 'utf8'), sig);
  }
}
