// The destruction chain: runner wipe evidence -> step 7 (activity trail seal)
// -> DestructionInitiated last in the trail -> sign (a fresh ephemeral key,
// registered then zeroized, or the managed authority's key) -> store the
// proof -> answer. Also the partial proof for capsules lost on a restart.
// Two-phase signing: when the managed key is unavailable the wipe still
// completes and the unsigned input is stored with the status move (phase 1);
// signPending signs it, unchanged, once the key is back (phase 2).
import { performance } from 'node:perf_hooks';
import { ApiError } from '../../shared/errors.js';
import {
  emitPartialRecord,
  emitRecord,
  generateEphemeralKey,
  incompleteSteps,
  toAuditProof,
  type ActivityEvent,
  type AuditRecord,
  type CapsuleContext,
  type EphemeralKey,
  type PartialRecordInput,
  type RecordInput,
  type SigningKeyMaterial,
  type Termination,
} from '../../shared/proof/index.js';
import { RunnerError, type DestroyResult, type LostCapsule } from '../../shared/runner-protocol.js';
import { ACTIVITY_PAGE, foldTrail, inlineBound, recordTruncation, type FoldedTrail } from './activity.js';
import type { Capsule, CapsuleStatus, Destruction, KeyRecord, OutboxEvent } from '../domain/index.js';
import { LIVE_STATUSES } from '../domain/index.js';
import type { LiveState } from './capsules.js';
import type { Deps } from './deps.js';
import { newId } from './ids.js';
import type { EgressSessions } from './egress-sessions.js';
import { regulatoryContext } from './regulatory.js';
import { usageEntry } from './usage.js';
import { fromRunner } from './runner-errors.js';
import { newEvent, verifyUrl } from './webhooks.js';

/** Ephemeral keys are not an authority's keys; the key record names them so. */
export const EPHEMERAL_AUTHORITY = 'svc-ephemeral';
export const LOST_ON_RESTART = 'capsule_state_lost_on_restart';
/** The capsule's runner stopped answering every control plane (several runners). */
export const RUNNER_LOST = 'capsule_runner_lost';

const TIMESTAMP_RE = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$/;

export type DestroyTrigger = 'customer_request' | 'ttl_expired';

function capsuleContext(c: Capsule): CapsuleContext {
  // docs/PROOF_FORMAT.md "The document": a pinned capsule's Capsulefile id and content hash are signed through the view.
  return {
    jurisdiction: c.jurisdiction,
    data_classification: c.data_classification,
    ...(c.capsulefile_id !== null && c.capsulefile_content_hash !== null
      ? { capsulefile_id: c.capsulefile_id, capsulefile_content_hash: c.capsulefile_content_hash }
      : {}),
  };
}

export class DestructionService {
  constructor(
    private readonly d: Deps,
    private readonly live: LiveState,
    private readonly egress: EgressSessions,
  ) {}

  /**
   * Ends a capsule's sealed egress layer before DestructionInitiated (so no
   * egress event can follow it) and returns what goes into step 4.
   */
  private async stopEgress(c: Capsule): Promise<Record<string, unknown> | null> {
    const ev = await this.egress.stop(c.id);
    if (ev) return ev;
    if (c.egress_profile_id === null) return null;
    // The proxy lived in an earlier control plane process; its keys ended with it.
    return {
      state: 'not_running_in_this_process',
      note: 'the egress proxy and its keys ended with the control plane process that started it; key destruction not measured',
    };
  }

  /**
   * DELETE: destroys a live capsule and returns the destroy response (already
   * stored). While its proof waits for the signing key, this and every repeat
   * answer 503 `signing_key_unavailable`; once signed, a repeat gets the stored response.
   */
  async destroy(c: Capsule, trigger: DestroyTrigger): Promise<Record<string, unknown>> {
    if (!LIVE_STATUSES.includes(c.status) && !this.live.destroying.has(c.id)) {
      const pending = await this.d.store.getPendingProof(c.id);
      if (pending?.signed_at === null) throw signingKeyUnavailable();
      const stored = pending ? await this.d.store.getProofByCapsule(c.id) : null;
      if (stored?.response) return stored.response;
    }
    const response = await this.destroyOrBuffer(c, trigger);
    if (response === null) throw signingKeyUnavailable();
    return response;
  }

  /** The destroy itself; null when the wipe is done and stored but the proof waits for the signing key. */
  async destroyOrBuffer(c: Capsule, trigger: DestroyTrigger): Promise<Record<string, unknown> | null> {
    if (!LIVE_STATUSES.includes(c.status) || this.live.destroying.has(c.id)) {
      throw new ApiError('resource_conflict', 'capsule already destroyed');
    }
    this.live.destroying.add(c.id);
    try {
      const commandRunning = this.live.isRunning(c.id);
      const egressEvidence = await this.stopEgress(c);
      await recordTruncation(this.d, c.id);
      await this.d.store.appendActivity(c.id, 'DestructionInitiated', this.d.clock.nowIso(), { trigger });
      let result: DestroyResult;
      try {
        result = await this.d.runner.destroy(c.id);
      } catch (e) {
        if (e instanceof RunnerError && e.code === 'not_found') {
          // The runner no longer has it: its state is gone; sign what we know.
          await this.partial(c, LOST_ON_RESTART);
          throw new ApiError(
            'capsule_expired',
            `capsule state was lost; its partial proof is at GET /v1/proofs/${c.id}`,
            { cause: e },
          );
        }
        throw fromRunner(e, 'capsule');
      }
      const status: CapsuleStatus = trigger === 'ttl_expired' ? 'expired' : 'destroyed';
      const destroyedAt = TIMESTAMP_RE.test(result.destroyed_at) ? result.destroyed_at : this.d.clock.nowIso();
      const trail = await foldTrail(this.d, c.id, inlineBound(this.d));
      // Step 7 is the control plane's: the trail it sealed, as counted.
      const evidence = Array.from({ length: 8 }, (_, i) => result.evidence[i] ?? {});
      // Step 4 (key destruction): the runner's capsule key plus the egress proxy's CA and leaf keys.
      if (egressEvidence) evidence[3] = { ...(evidence[3] ?? {}), egress_proxy: egressEvidence };
      evidence[6] = {
        activity_events: trail.count,
        first_seq: trail.first_seq,
        last_seq: trail.last?.seq ?? null,
        last_event_type: trail.last?.type ?? null,
        ...(trail.events === null ? { activity_inline: false } : {}),
      };
      const termination: Termination = {
        trigger,
        command_was_running: result.command_was_running || commandRunning,
        ...(result.command_was_running || commandRunning ? { command_completed: false } : {}),
      };
      const notDone = new Set(incompleteSteps(evidence).map((s) => s.step));
      const regulatory = regulatoryContext(this.d.regulatory, c.jurisdiction, notDone);
      const attestations = (await this.d.cosign?.collect(c.id)) ?? null;
      const input: RecordInput = {
        capsule_id: c.id,
        created_at: c.created_at,
        destroyed_at: destroyedAt,
        evidence,
        ...trailInput(trail),
        ...(attestations ? { customer_attestations: attestations } : {}),
        capsule_context: capsuleContext(c),
        termination,
        regulatory_context: regulatory,
        internal: { customer_id: c.customer_id, region: this.d.region, billable: c.billable },
      };
      const snapshot = await this.d.store.getCapsule(c.id);
      const base: Record<string, unknown> = {
        capsule_id: c.id,
        status,
        destroyed_at: destroyedAt,
        total_executions: snapshot?.execution_count ?? c.execution_count,
        total_bytes_processed: snapshot?.bytes_processed ?? c.bytes_processed,
        regulatory_context: regulatory,
        capsule_context: capsuleContext(c),
      };
      const proofId = newId('prf_', this.d.random);
      const record = this.trySign((key) => emitRecord(input, key, this.d.proofCrypto));
      const response = record ? withProof(base, record) : null;
      await this.d.store.recordDestruction({
        capsule: c,
        from: LIVE_STATUSES,
        status,
        destroyed_at: destroyedAt,
        events: [
          ...(record ? [this.cdpGenerated(c, proofId, record)] : []),
          newEvent(this.d, c.customer_id, status === 'expired' ? 'capsule.expired' : 'capsule.destroyed', {
            capsule_id: c.id,
            status,
            destroyed_at: destroyedAt,
            trigger,
            proof_id: proofId,
          }),
        ],
        ...this.proofOrPending(c, proofId, false, input, record, response, base),
      });
      this.egress.forget(c.id);
      this.d.webhooks.kick?.();
      this.d.log.info({ capsule_id: c.id, trigger, proof_buffered: record === null }, 'capsule destroyed');
      return response;
    } finally {
      this.live.destroying.delete(c.id);
    }
  }

  /** Marks a capsule whose runner state is gone `expired_unclean` with a signed partial proof. */
  async partial(c: Capsule, reason: string, lost?: LostCapsule): Promise<void> {
    // A partial proof has no step evidence: the proxy's key destruction is logged only.
    const egressEvidence = await this.egress.stop(c.id).catch(() => null);
    if (egressEvidence)
      this.d.log.warn(
        { capsule_id: c.id, egress_proxy: egressEvidence },
        'egress proxy stopped for a capsule lost on restart',
      );
    this.egress.forget(c.id);
    const existing = await this.d.store.getProofByCapsule(c.id);
    if (existing) {
      // The proof was stored before a crash cut the status update: finish it.
      await this.d.store.transition(c.id, LIVE_STATUSES, existing.partial ? 'expired_unclean' : 'destroyed');
      await this.d.store.releaseLive(c.customer_id);
      return;
    }
    // The runner's recovery wipe, as it measured it, goes into the trail (signed through the root) and the evidence.
    // `recovery` (processes killed, cgroup, tmpfs, egress socket clean-up) is absent only from older runners.
    const recoveryWipe = lost
      ? { recovered_at: lost.recovered_at, wipe: lost.wipe, ...(lost.recovery ? { recovery: lost.recovery } : {}) }
      : null;
    if (recoveryWipe && !(await this.hasRecoveryEvent(c.id)))
      await this.d.store.appendActivity(c.id, 'RunnerRecoveryWipe', this.d.clock.nowIso(), {
        recovered_at: recoveryWipe.recovered_at,
        wipe_measured: recoveryWipe.wipe !== null,
        ...(recoveryWipe.wipe ? { wipe: recoveryWipe.wipe } : {}),
      });
    const trail = await foldTrail(this.d, c.id, inlineBound(this.d));
    // A command was in flight when the state was lost if the capsule was left `executing`
    // or the trail holds an ExecutionStarted that never completed.
    const wasRunning = c.status === 'executing' || trail.open_executions > 0;
    const attestations = (await this.d.cosign?.collect(c.id)) ?? null;
    const input: PartialRecordInput = {
      capsule_id: c.id,
      created_at: c.created_at,
      reason,
      ...trailInput(trail),
      ...(attestations ? { customer_attestations: attestations } : {}),
      ...(recoveryWipe ? { evidence: [{ runner_recovery: recoveryWipe }] } : {}),
      capsule_context: capsuleContext(c),
      termination: {
        trigger: 'system_restart',
        command_was_running: wasRunning,
        ...(wasRunning ? { command_completed: false } : {}),
      },
      internal: { customer_id: c.customer_id, region: this.d.region, billable: c.billable },
    };
    const proofId = newId('prf_', this.d.random);
    const record = this.trySign((key) => emitPartialRecord(input, key, this.d.proofCrypto));
    await this.d.store.recordDestruction({
      capsule: c,
      from: LIVE_STATUSES,
      status: 'expired_unclean',
      destroyed_at: null,
      events: [
        ...(record ? [this.cdpGenerated(c, proofId, record)] : []),
        newEvent(this.d, c.customer_id, 'capsule.failed', {
          capsule_id: c.id,
          status: 'expired_unclean',
          reason,
          proof_id: proofId,
        }),
      ],
      ...this.proofOrPending(c, proofId, true, input, record, null, null),
    });
    this.d.webhooks.kick?.();
    this.d.log.warn({ capsule_id: c.id, reason, proof_buffered: record === null }, 'capsule expired unclean');
  }

  /** The signed proof to store with the status move, or (key unavailable) the pending row holding its input. */
  private proofOrPending(
    c: Capsule,
    proofId: string,
    partial: boolean,
    input: RecordInput | PartialRecordInput,
    record: AuditRecord | null,
    response: Record<string, unknown> | null,
    base: Record<string, unknown> | null,
  ): Pick<Destruction, 'proof' | 'pending' | 'key' | 'usage'> {
    const now = this.d.clock.nowIso();
    if (record)
      return {
        proof: {
          proof_id: proofId,
          capsule_id: c.id,
          customer_id: c.customer_id,
          record: record as unknown as Record<string, unknown>,
          response,
          partial,
          created_at: now,
        },
        key: this.keyRecordOf(record),
        usage: usageEntry(this.d, 'proof', 1, now),
      };
    this.d.log.warn({ capsule_id: c.id }, 'signing key unavailable: wipe stored, proof buffered until the key is back');
    return {
      proof: null,
      key: null,
      usage: null,
      pending: {
        capsule_id: c.id,
        customer_id: c.customer_id,
        proof_id: proofId,
        partial,
        billable: c.billable,
        input: input as unknown as Record<string, unknown>,
        response: base,
        created_at: now,
        signed_at: null,
      },
    };
  }

  /**
   * Phase 2: signs the buffered proofs, oldest first, while the key is usable;
   * each is stored with its usage and `cdp.generated` exactly once, whichever
   * process gets there first. Returns how many this call stored.
   */
  async signPending(limit = 50): Promise<number> {
    const due = await this.d.store.unsignedProofs(limit);
    let stored = 0;
    for (const p of due) {
      const record = this.trySign((key) =>
        p.partial
          ? emitPartialRecord(p.input as unknown as PartialRecordInput, key, this.d.proofCrypto)
          : emitRecord(p.input as unknown as RecordInput, key, this.d.proofCrypto),
      );
      if (record === null) break;
      const now = this.d.clock.nowIso();
      const c = { id: p.capsule_id, customer_id: p.customer_id };
      const done = await this.d.store.completePendingProof(
        p,
        {
          proof_id: p.proof_id,
          capsule_id: p.capsule_id,
          customer_id: p.customer_id,
          record: record as unknown as Record<string, unknown>,
          response: p.response ? withProof(p.response, record) : null,
          partial: p.partial,
          created_at: now,
        },
        usageEntry(this.d, 'proof', 1, now),
        [this.cdpGenerated(c, p.proof_id, record)],
      );
      if (!done) continue;
      stored++;
      this.d.log.info({ capsule_id: p.capsule_id }, 'buffered proof signed and stored');
    }
    if (stored > 0) this.d.webhooks.kick?.();
    return stored;
  }

  /**
   * Signs with the managed authority's current key when one is configured, else a fresh
   * ephemeral key (zeroized after); null when the managed key is unavailable.
   */
  private trySign(emit: (key: SigningKeyMaterial) => AuditRecord): AuditRecord | null {
    const started = performance.now();
    const record = this.sign(emit);
    this.d.metrics?.proofSigned((performance.now() - started) / 1000, record ? 'signed' : 'buffered');
    return record;
  }

  private sign(emit: (key: SigningKeyMaterial) => AuditRecord): AuditRecord | null {
    const signer = this.d.signer;
    if (!signer) {
      const key = generateEphemeralKey(this.d.random, this.d.proofCrypto);
      try {
        return emit({ mode: 'ephemeral', key });
      } finally {
        zeroize(key);
      }
    }
    return signer.withKey((k) => emit({ mode: 'managed', ...k }));
  }

  /** Ephemeral keys are registered per proof; managed keys are answered by the signer. */
  private keyRecordOf(record: AuditRecord): KeyRecord | null {
    const att = record.attestation;
    if (!att || record.signing_authority_id !== undefined) return null;
    return this.keyRecord(att.key_id, att.public_key.replace(/^base64:/, ''));
  }

  /**
   * Terminal state of a capsule whose proof could not be built after its retry
   * budget: a partial proof when one can still be made, otherwise
   * `expired_unclean` with no proof (GET /v1/proofs answers 404) and the error logged.
   */
  async abandon(id: string, reason: string): Promise<void> {
    const c = await this.d.store.getCapsule(id);
    if (!c || !LIVE_STATUSES.includes(c.status)) return;
    // Nothing of it may keep running; the runner's wipe happens in its destroy.
    await this.d.runner.destroy(id).catch(() => undefined);
    try {
      await this.partial(c, reason);
      return;
    } catch (e) {
      this.d.log.error({ capsule_id: id, err: e, reason }, 'no proof could be built; capsule ends expired_unclean');
    }
    if (await this.d.store.transition(id, LIVE_STATUSES, 'expired_unclean'))
      await this.d.store.releaseLive(c.customer_id);
  }

  /** A retried partial proof must not add the recovery wipe twice. */
  private async hasRecoveryEvent(capsuleId: string): Promise<boolean> {
    let after = 0;
    for (;;) {
      const page = await this.d.store.activityPage(capsuleId, after, ACTIVITY_PAGE);
      if (page.some((e) => e.type === 'RunnerRecoveryWipe')) return true;
      if (page.length < ACTIVITY_PAGE) return false;
      after = page[page.length - 1]!.seq;
    }
  }

  /** cdp.generated: the stored proof's identity and hashes, and where anyone can verify it. */
  private cdpGenerated(c: Pick<Capsule, 'id' | 'customer_id'>, proofId: string, signed: AuditRecord): OutboxEvent {
    const record = signed as unknown as Record<string, unknown>;
    const termination = record.termination as { trigger?: unknown } | undefined;
    return newEvent(this.d, c.customer_id, 'cdp.generated', {
      capsule_id: c.id,
      proof_id: proofId,
      cdp_version: record.cdp_version ?? null,
      completeness: record.completeness ?? 'complete',
      canonical_hash: record.canonical_hash ?? null,
      final_hash: record.final_hash ?? null,
      termination: { trigger: termination?.trigger ?? null },
      verify_url: verifyUrl(this.d, c.id),
    });
  }

  private keyRecord(keyId: string, publicKey: string): KeyRecord {
    return {
      key_id: keyId,
      algorithm: 'Ed25519',
      public_key: publicKey,
      created_at: this.d.clock.nowIso(),
      signing_authority_id: EPHEMERAL_AUTHORITY,
      signing_key_version: 1,
    };
  }
}

/** 503 while a capsule's proof waits for the signing key: the wipe is done, the proof is delayed, never lost. */
export function signingKeyUnavailable(): ApiError {
  return new ApiError('service_unavailable', 'the signing key is unavailable; the proof is buffered, retry later', {
    extra: { retry_after: 30, degradation_mode: 'signing_key_unavailable' },
  });
}

/** The destroy response: the fixed fields and the signed record in both forms. */
function withProof(base: Record<string, unknown>, record: AuditRecord): Record<string, unknown> {
  return { ...base, cdp: record, audit_proof: toAuditProof(record) };
}

/** The emitter's trail members: inline events when the trail is within the bound, the folded root always. */
function trailInput(trail: FoldedTrail): {
  activity: ActivityEvent[];
  activity_root: string;
  activity_carried: boolean;
} {
  return { activity: trail.events ?? [], activity_root: trail.root, activity_carried: trail.events !== null };
}

/** Belt and braces: emitRecord zeroizes too; a throw before it must not leak. */
function zeroize(k: EphemeralKey): void {
  k.privateKey.fill(0);
}
