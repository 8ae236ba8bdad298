// Proof reads, the public verify endpoint and the key registry.
import { ApiError } from '../../shared/errors.js';
import {
  toAuditProof,
  toPresentation,
  verifyProof,
  type AuditRecord,
  type VerifyResult,
} from '../../shared/proof/index.js';
import type { Caller, KeyRecord, StoredProof, TrustManifest } from '../domain/index.js';
import type { Deps } from './deps.js';
import { signingKeyUnavailable } from './destruction.js';
import { verifyHostedRequest, withSummary, type HostedResult } from './hosted-verify.js';
import { VerifyPool } from './verify-pool.js';

const proofNotFound = (): ApiError =>
  new ApiError('resource_not_found', 'proof not found (the capsule may not be destroyed yet)');

export class ProofService {
  private readonly pool = new VerifyPool();
  constructor(private readonly d: Deps) {}

  /** The stored proof; 503 `signing_key_unavailable` while it waits for the key (for its owner, when one is named). */
  private async stored(capsuleId: string, owner?: string): Promise<StoredProof> {
    const p = capsuleId.length <= 64 ? await this.d.store.getProofByCapsule(capsuleId) : null;
    if (p) return p;
    const pending = capsuleId.length <= 64 ? await this.d.store.getPendingProof(capsuleId) : null;
    if (pending && pending.signed_at === null && (owner === undefined || pending.customer_id === owner))
      throw signingKeyUnavailable();
    throw proofNotFound();
  }

  /** Another account's proof is 404 like a missing one; a store failure stays a 500, not a 404. */
  private async owned(caller: Caller, capsuleId: string): Promise<StoredProof> {
    const p = await this.stored(capsuleId, caller.account.customer_id);
    if (p.customer_id !== caller.account.customer_id) throw proofNotFound();
    return p;
  }

  /** GET /v1/capsules/:id/cdp: the full AuditRecord. */
  async record(caller: Caller, capsuleId: string): Promise<Record<string, unknown>> {
    return (await this.owned(caller, capsuleId)).record;
  }

  /** GET /v1/proofs/:capsule_id: the stored proof record. */
  async proofRecord(caller: Caller, capsuleId: string): Promise<Record<string, unknown>> {
    const p = await this.owned(caller, capsuleId);
    const r = p.record as unknown as AuditRecord;
    const v = this.verify(p.record);
    return {
      proof_id: p.proof_id,
      capsule_id: p.capsule_id,
      cdp: p.record,
      component_proofs: r.component_proofs ?? {},
      verified: v.valid,
      // The verifier's one line, e.g. "AuditProof verified; destruction reported incomplete (step 3: ...)".
      summary: v.summary,
      created_at: p.created_at,
    };
  }

  /**
   * GET /v1/capsules/:id/cdp/verify (public; the URL is the capability): the
   * canonical AuditProof with the activity trail (SPEC: "includes the
   * capsule's activity trail"), bound by its signed `activity_root`. The
   * record's evidence and internal ids stay out.
   */
  async publicProof(capsuleId: string, presentation: boolean): Promise<Record<string, unknown>> {
    const r = (await this.stored(capsuleId)).record as unknown as AuditRecord;
    if (presentation) return toPresentation(r);
    return { ...(toAuditProof(r) as unknown as Record<string, unknown>), activity: r.activity };
  }

  /** The stored-proof check: the full document, offline rules. */
  verify(doc: unknown): VerifyResult & { summary: string } {
    return withSummary(
      verifyProof(doc, {
        now: () => this.d.clock.nowIso(),
        ...(this.d.proofCrypto ? { crypto: this.d.proofCrypto } : {}),
      }),
    );
  }

  /** POST /v1/verify on a parsed body, in this thread (small bodies). */
  verifyRequest(body: unknown): HostedResult {
    return verifyHostedRequest(body, () => this.d.clock.nowIso(), this.d.proofCrypto);
  }

  /** POST /v1/verify on the body's JSON bytes, parsed and verified in the verify worker (large bodies). */
  async verifyRequestJson(bytes: Uint8Array): Promise<HostedResult> {
    try {
      return await this.pool.run(bytes, this.d.clock.nowIso());
    } catch (e) {
      if (e instanceof ApiError) throw e;
      throw new ApiError('internal_error', 'internal error', { cause: e });
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
  }

  /** This install's trust manifest: its authority and key versions; no authority when ephemeral. */
  trustManifest(): TrustManifest {
    return this.d.signer?.manifest() ?? { authorities: [] };
  }

  async key(keyId: string): Promise<KeyRecord> {
    const managed = keyId.length <= 128 ? (this.d.signer?.keyRecord(keyId) ?? null) : null;
    if (managed) return managed;
    const k = keyId.length <= 128 ? await this.d.store.getKey(keyId) : null;
    if (!k) throw new ApiError('resource_not_found', 'key not found');
    return k;
  }
}
