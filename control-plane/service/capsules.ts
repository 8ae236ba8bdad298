// Capsule lifecycle up to destruction: create, read, list, exec, upload,
// output. Every step that touches customer data records its activity event
// durably as it happens.
import { createHash } from 'node:crypto';
import { ApiError, invalid } from '../../shared/errors.js';
import {
  RunnerError,
  type CapsuleUsage,
  type ExecRequest,
  type ExecResult,
  type FileEntry,
  type ListedFile,
} from '../../shared/runner-protocol.js';
import type {
  ApiForm,
  Caller,
  Capsule,
  CapsulePage,
  DataClassification,
  EgressSpec,
  InsertCapsuleOutcome,
  OutboxEvent,
  RunningEgress,
} from '../domain/index.js';
import { EgressConfigError, LIVE_STATUSES } from '../domain/index.js';
import { cycleStart, isoMicros } from './clock.js';
import type { Deps } from './deps.js';
import { newId, sha512Prefixed } from './ids.js';
import { usageEntry } from './usage.js';
import { activityCap } from './activity.js';
import { fromRunner } from './runner-errors.js';
import type { RecoveryGate } from './recovery.js';
import { notFound as capsulefileNotFound, unmetPackagesWhy, type CapsulefileService } from './capsulefiles.js';
import { profileNotFound, requireEgressTier, type EgressProfileService } from './egress-profiles.js';
import { gate, type EgressSessions } from './egress-sessions.js';
import { newEvent } from './webhooks.js';

export const DEFAULT_TTL_SECONDS = 300;
/** Percentages of a monthly quota that send quota.threshold. */
export const QUOTA_THRESHOLDS = [80, 100] as const;
/** Runner memory ceiling per capsule when no Capsulefile sets one. */
export const DEFAULT_MEMORY_MB = 256;

export interface CreateInput {
  ttl?: number | undefined;
  data_classification?: DataClassification | undefined;
  capsulefile_id?: string | undefined;
  egress_profile_id?: string | undefined;
  metadata: Record<string, string>;
  form: ApiForm;
  /** The request's Idempotency-Key: written with the capsule, so a retry after a crash finds it. */
  idempotency_key?: string | undefined;
}

/** Tracks in-process state the database does not need: running execs, destroys under way. */
export class LiveState {
  readonly destroying = new Set<string>();
  /** Capsules the runner may hold before their row exists (create in flight): recovery leaves them alone. */
  readonly creating = new Set<string>();
  private readonly running = new Map<string, number>();
  begin(id: string): number {
    const n = (this.running.get(id) ?? 0) + 1;
    this.running.set(id, n);
    return n;
  }
  end(id: string): number {
    const n = (this.running.get(id) ?? 1) - 1;
    if (n <= 0) this.running.delete(id);
    else this.running.set(id, n);
    return Math.max(n, 0);
  }
  isRunning(id: string): boolean {
    return (this.running.get(id) ?? 0) > 0;
  }
}

/** Runner refusals that happen before the command starts (nothing ran). */
const REFUSED_BEFORE_RUN: ReadonlySet<string> = new Set(['invalid', 'not_found', 'busy', 'no_space', 'too_large']);

export class CapsuleService {
  private get cap(): number {
    return activityCap(this.d);
  }

  constructor(
    private readonly d: Deps,
    private readonly live: LiveState,
    private readonly gate: RecoveryGate,
    private readonly capsulefiles: CapsulefileService,
    private readonly profiles: EgressProfileService,
    private readonly egress: EgressSessions,
  ) {}

  /** Loads a capsule the caller owns; anything else is 404 (SPEC: ownership). */
  async owned(caller: Caller, id: string, form?: ApiForm): Promise<Capsule> {
    const c = id.length <= 64 ? await this.d.store.getCapsule(id) : null;
    if (!c || c.customer_id !== caller.account.customer_id || (form && c.api_form !== form)) {
      throw new ApiError('resource_not_found', `${form === 'session' ? 'session' : 'capsule'} not found`);
    }
    return c;
  }

  /**
   * Storage (and memory) use of a live capsule as its runner measures it;
   * null when the capsule is not live or the runner cannot say right now
   * (a status read never fails because of it).
   */
  async usage(c: Capsule): Promise<CapsuleUsage | null> {
    if (!LIVE_STATUSES.includes(c.status) || this.live.destroying.has(c.id) || !this.d.runner.usage) return null;
    try {
      return await this.d.runner.usage(c.id);
    } catch {
      return null;
    }
  }

  /** A capsule an operation needs alive: destroyed or expiring ones give 410. */
  async ownedLive(caller: Caller, id: string, form?: ApiForm): Promise<Capsule> {
    // Reconcile first: a recovery pass may just have ended this capsule (read its row after it).
    await this.gate.ensure();
    const c = await this.owned(caller, id, form);
    if (!LIVE_STATUSES.includes(c.status) || this.live.destroying.has(c.id)) {
      throw new ApiError(
        'capsule_expired',
        `capsule is ${c.status === 'active' || c.status === 'executing' ? 'being destroyed' : c.status}; its proof is at GET /v1/proofs/${c.id}`,
      );
    }
    return c;
  }

  async create(caller: Caller, input: CreateInput): Promise<Capsule> {
    const a = caller.account;
    const limits = this.d.tiers.limits(a.tier);
    await this.gate.ensure();
    // Sealed egress only for a capsule with an allowlist (an egress profile); otherwise loopback only.
    let egressRules: EgressSpec['rules'] | null = null;
    let egressProfileId: string | null = null;
    if (input.egress_profile_id !== undefined) {
      requireEgressTier(caller, 'egress_profile_id');
      const profile = await this.profiles.owned(caller, input.egress_profile_id, 'egress_profile_id');
      if (!this.egress.available)
        throw new ApiError('service_unavailable', 'egress_profile_id: this install runs no sealed egress layer');
      egressProfileId = profile.id;
      egressRules = (await this.d.egressProfiles.allRules(profile.id)).map((r) => ({
        kind: r.kind,
        value: r.value,
        port: r.port,
      }));
    }
    const pinned =
      input.capsulefile_id === undefined ? null : await this.capsulefiles.forCapsule(caller, input.capsulefile_id);
    const def = pinned?.capsulefile.definition;
    // Checked at Capsulefile create and finalize too; again here in case the base image changed since.
    if (def?.packages) {
      const unmet = await this.d.baseImage.unmetPackages(def.packages);
      if (unmet.length > 0) throw invalid('capsulefile_id', unmetPackagesWhy(unmet));
    }
    // Capsulefile defaults apply under the request's own values, then the tier caps.
    const ttl = Math.min(input.ttl ?? def?.default_ttl ?? DEFAULT_TTL_SECONDS, limits.max_ttl_seconds);
    const memoryMb =
      def?.memory_mb === undefined
        ? DEFAULT_MEMORY_MB
        : Math.min(def.memory_mb, this.d.capsulefileLimits[a.tier].max_memory_mb);
    const billable = caller.key_mode === 'live';
    const cycle = cycleStart(this.d.clock.nowMs());
    const monthly = limits.capsules_per_month;
    // quota.threshold: the month's count reaching 80 % and 100 % of the quota, in the reservation's transaction.
    const onCount = (before: number, after: number): OutboxEvent[] =>
      monthly === null
        ? []
        : QUOTA_THRESHOLDS.filter((pct) => {
            const at = Math.ceil((monthly * pct) / 100);
            return before < at && after >= at;
          }).map((pct) =>
            newEvent(this.d, a.customer_id, 'quota.threshold', {
              quota: 'capsules_per_month',
              threshold_percent: pct,
              used: after,
              limit: monthly,
              billing_cycle_start: cycle,
            }),
          );
    const outcome = await this.d.store.reserveCapsule(a.customer_id, limits, cycle, billable, onCount);
    if (outcome !== 'ok') {
      const what =
        outcome === 'concurrent_capsules'
          ? `concurrent capsules (${limits.concurrent_capsules})`
          : outcome === 'cdp_limit'
            ? `proofs this month (${limits.cdp_limit})`
            : `capsules this month (${limits.capsules_per_month})`;
      throw new ApiError('quota_exceeded', `quota reached: ${what} for tier ${a.tier}`, { extra: { limit: outcome } });
    }
    const id = newId(input.form === 'session' ? 'sess_' : 'cap_', this.d.random);
    const nowMs = this.d.clock.nowMs();
    const capsule: Capsule = {
      id,
      customer_id: a.customer_id,
      status: 'active',
      api_form: input.form,
      ttl_seconds: ttl,
      created_at: isoMicros(nowMs),
      expires_at: isoMicros(nowMs + ttl * 1000),
      data_classification: input.data_classification ?? def?.data_classification ?? 'general',
      jurisdiction: a.jurisdiction,
      capsulefile_id: pinned?.capsulefile.id ?? null,
      capsulefile_content_hash: pinned?.capsulefile.content_hash ?? null,
      egress_profile_id: egressProfileId,
      metadata: input.metadata,
      execution_count: 0,
      bytes_processed: 0,
      destroyed_at: null,
      billable,
    };
    this.live.creating.add(id);
    try {
      return await this.start(capsule, egressRules, memoryMb, pinned, input.idempotency_key);
    } finally {
      this.live.creating.delete(id);
    }
  }

  /** Proxy, runner sandbox, then the row; undone on any failure. The quota slot is already reserved. */
  private async start(
    capsule: Capsule,
    egressRules: EgressSpec['rules'] | null,
    memoryMb: number,
    pinned: Awaited<ReturnType<CapsulefileService['forCapsule']>> | null,
    idempotencyKey: string | undefined,
  ): Promise<Capsule> {
    const { id, customer_id: customerId, billable } = capsule;
    const def = pinned?.capsulefile.definition;
    // The proxy starts before the runner's capsule (the runner bridges its socket); its events wait for the row.
    const rowReady = gate();
    let egress: RunningEgress | null = null;
    if (egressRules !== null) {
      try {
        // The AND of profile and declaration: no Capsulefile or no declaration means nothing is allowed.
        egress = await this.egress.start(
          {
            capsuleId: id,
            rules: egressRules,
            declaration: def?.egress_declaration ?? [],
            ...(def?.mcp_policy !== undefined ? { mcpPolicy: def.mcp_policy } : {}),
          },
          rowReady,
        );
      } catch (e) {
        await this.d.store.unreserveCapsule(customerId, billable);
        if (e instanceof EgressConfigError) {
          const field = /^(\w+):/.exec(e.message)?.[1] ?? 'egress_profile_id';
          throw new ApiError('invalid_parameters', e.message, { extra: { field } });
        }
        throw e;
      }
    }
    const dropEgress = async (): Promise<void> => {
      rowReady.close();
      if (egress) {
        await this.egress.stop(id).catch(() => null);
        this.egress.forget(id);
      }
    };
    try {
      await this.d.runner.create({
        capsule_id: id,
        memory_mb: memoryMb,
        // The account, opaque to the runner: its capsules share one CPU weight.
        tenant: createHash('sha256').update(customerId).digest('base64url').slice(0, 22),
        // Files mounted read-only at /capsule/app; env_vars set for every exec.
        ...(pinned
          ? {
              env: { ...(def?.env_vars ?? {}) },
              app_files: pinned.files.map((f) => ({
                filename: f.filename,
                content_b64: Buffer.from(f.bytes).toString('base64'),
              })),
            }
          : {}),
        ...(egress ? { egress: { proxy_socket: egress.proxySocket, ca_pem: egress.caPem } } : {}),
      });
    } catch (e) {
      await dropEgress();
      await this.d.store.unreserveCapsule(customerId, billable);
      throw fromRunner(e, 'capsule');
    }
    // Nothing half-written: the runner's capsule goes, the slot comes back.
    const undoStarted = async (): Promise<void> => {
      await this.d.runner.destroy(id).catch(() => undefined);
      await dropEgress();
      await this.d.store.unreserveCapsule(customerId, billable);
    };
    let inserted: InsertCapsuleOutcome;
    try {
      inserted = await this.d.store.insertCapsule(
        capsule,
        {
          type: 'CapsuleStarted',
          at: capsule.created_at,
          fields: {
            data_classification: capsule.data_classification,
            jurisdiction: capsule.jurisdiction,
            region: this.d.region,
            ...(capsule.capsulefile_id !== null
              ? { capsulefile_id: capsule.capsulefile_id, capsulefile_content_hash: capsule.capsulefile_content_hash }
              : {}),
            // The allowlist in force, bound into the trail: profile id and a hash of its rules as snapshotted now.
            ...(egressRules !== null
              ? { egress_profile_id: capsule.egress_profile_id, egress_rules_hash: rulesHash(egressRules) }
              : {}),
          },
        },
        usageEntry(this.d, 'capsule', 1, capsule.created_at),
        [
          newEvent(this.d, customerId, 'capsule.created', {
            capsule_id: id,
            status: capsule.status,
            created_at: capsule.created_at,
            expires_at: capsule.expires_at,
            ttl_seconds: capsule.ttl_seconds,
            data_classification: capsule.data_classification,
            capsulefile_id: capsule.capsulefile_id,
            test_mode: !billable,
          }),
        ],
        idempotencyKey,
      );
    } catch (e) {
      await undoStarted();
      throw e;
    }
    if (inserted !== 'ok') {
      // A DELETE of the pinned Capsulefile or profile committed while the runner
      // was creating: the create answers as if it came after the delete.
      await undoStarted();
      throw inserted === 'capsulefile_gone'
        ? capsulefileNotFound('capsulefile_id')
        : profileNotFound('egress_profile_id');
    }
    // Co-signing starts with the first event; every later one reaches the co-signer as it is appended.
    const signing = def?.signing_config;
    if (signing && this.d.cosign) {
      this.d.cosign.open(id, signing);
      const [first] = await this.d.store.activityPage(id, 0, 1);
      if (first) this.d.cosign.submit(id, first);
    }
    rowReady.open();
    this.d.webhooks.kick?.();
    this.d.log.info({ capsule_id: id, customer_id: customerId }, 'capsule created');
    return capsule;
  }

  /** The command an exec without `command` runs on `c` (loaded by owned()): the pinned Capsulefile's entrypoint. */
  async entrypointFor(c: Capsule): Promise<string> {
    const cf = c.capsulefile_id === null ? null : await this.d.capsulefiles.getCapsulefile(c.capsulefile_id);
    if (!cf) throw invalid('command', 'is required (the capsule has no Capsulefile entrypoint)');
    return cf.definition.entrypoint;
  }

  async list(caller: Caller, limit: number, cursor: string | null): Promise<CapsulePage> {
    return this.d.store.listCapsules(caller.account.customer_id, limit, cursor);
  }

  async exec(
    caller: Caller,
    id: string,
    req: {
      command: string;
      input_data?: string | undefined;
      input_filename?: string | undefined;
      timeout?: number | undefined;
      /** Working directory inside the capsule (runner default: /data). */
      cwd?: ExecRequest['cwd'];
    },
    form?: ApiForm,
  ): Promise<ExecResult> {
    const c = await this.ownedLive(caller, id, form);
    const remainingS = Math.max(1, Math.ceil((Date.parse(c.expires_at) - this.d.clock.nowMs()) / 1000));
    const timeoutS = Math.min(req.timeout ?? c.ttl_seconds, remainingS);
    const inputBytes = req.input_data === undefined ? 0 : Buffer.byteLength(req.input_data, 'utf8');
    const first = this.live.begin(c.id) === 1;
    let result: ExecResult;
    let settled = false;
    try {
      // The trail binds what ran without carrying the command text or input bytes.
      const started = await this.d.store.appendActivity(
        c.id,
        'ExecutionStarted',
        this.d.clock.nowIso(),
        {
          command_hash: sha512Prefixed(req.command),
          input_size_bytes: inputBytes,
          timeout_seconds: timeoutS,
        },
        { cap: this.cap, ...(first ? { move: { from: ['active'], to: 'executing' } } : {}) },
      );
      // A recorded start always gets its completion (past the cap too); a dropped one is counted only.
      const closing = started !== null ? {} : { cap: this.cap };
      const execReq = {
        capsule_id: c.id,
        command: req.command,
        timeout_ms: timeoutS * 1000,
        ...(req.input_data !== undefined ? { input_b64: Buffer.from(req.input_data, 'utf8').toString('base64') } : {}),
        ...(req.input_filename !== undefined ? { input_filename: req.input_filename } : {}),
        ...(req.cwd !== undefined ? { cwd: req.cwd } : {}),
      };
      try {
        result = await this.d.runner.exec(execReq);
      } catch (e) {
        // The runner answered but the result is lost (e.g. refused as too large): the trail still
        // closes the exec and counts it when it may have run. A runner gone mid-exec ('unavailable')
        // leaves it open on purpose: the partial proof states the command was running, not completed.
        const runnerLost = e instanceof RunnerError && e.code === 'unavailable';
        if (!this.live.destroying.has(c.id) && !runnerLost) {
          const code = e instanceof RunnerError ? e.code : 'internal';
          const mayHaveRun =
            !(e instanceof RunnerError) || !REFUSED_BEFORE_RUN.has(e.code) || /^frame /.test(e.message);
          await this.d.store
            .appendActivity(
              c.id,
              'ExecutionFailed',
              this.d.clock.nowIso(),
              { error: code },
              { ...closing, executions: mayHaveRun ? 1 : 0, bytes: mayHaveRun ? inputBytes : 0 },
            )
            .catch((err: unknown) => this.d.log.error({ capsule_id: c.id, err }, 'exec: failure event not recorded'));
        }
        throw fromRunner(e, 'capsule');
      }
      // Egress events of this exec land in the trail before its completion event.
      await this.egress.flush(c.id);
      const last = this.live.end(c.id) === 0;
      settled = true;
      const completedAt = this.d.clock.nowIso();
      const usage = usageEntry(this.d, 'exec', Math.max(0, Math.round(result.duration_ms)), completedAt);
      const side = {
        ...closing,
        executions: 1,
        bytes: inputBytes,
        usage,
        ...(last ? { move: { from: ['executing'] as const, to: 'active' as const } } : {}),
      };
      if (!this.live.destroying.has(c.id)) {
        const fields = {
          exit_code: result.exit_code,
          duration_ms: result.duration_ms,
          timed_out: result.timed_out,
          // Hashed by the runner off every serving loop when it could; here otherwise.
          stdout_hash: result.stdout_sha512 ?? sha512Prefixed(result.stdout),
          stderr_hash: result.stderr_sha512 ?? sha512Prefixed(result.stderr),
          // The hashes are over the output as returned; a cut stream says so.
          ...(result.stdout_truncated ? { stdout_truncated: true } : {}),
          ...(result.stderr_truncated ? { stderr_truncated: true } : {}),
          // Stopped by the service: its processes kept hitting the capsule's process bound.
          ...(result.process_limit_killed ? { process_limit_killed: true } : {}),
        };
        await this.d.store.appendActivity(
          c.id,
          result.oom_killed ? 'ExecutionOomKilled' : 'ExecutionCompleted',
          completedAt,
          fields,
          side,
        );
      } else {
        // Destruction has begun: its DestructionInitiated stays the last event.
        await this.d.store.addUsage(c.id, 1, inputBytes, usage);
      }
    } finally {
      if (!settled && this.live.end(c.id) === 0)
        await this.d.store.transition(c.id, ['executing'], 'active').catch(() => undefined);
    }
    return result;
  }

  async upload(caller: Caller, id: string, filename: string, bytes: Uint8Array): Promise<FileEntry> {
    const c = await this.ownedLive(caller, id);
    let entry: FileEntry;
    try {
      entry = await this.d.runner.upload(c.id, filename, bytes);
    } catch (e) {
      throw fromRunner(e, 'filename');
    }
    await this.d.store.appendActivity(
      c.id,
      'FileUploaded',
      this.d.clock.nowIso(),
      {
        sha512: entry.sha512,
        size_bytes: entry.size_bytes,
        direction: 'inbound',
      },
      { bytes: entry.size_bytes, cap: this.cap },
    );
    return entry;
  }

  async listOutput(caller: Caller, id: string): Promise<ListedFile[]> {
    const c = await this.ownedLive(caller, id);
    try {
      return await this.d.runner.listOutput(c.id);
    } catch (e) {
      throw fromRunner(e, 'capsule');
    }
  }

  async readOutput(caller: Caller, id: string, filename: string): Promise<{ entry: FileEntry; bytes: Uint8Array }> {
    const c = await this.ownedLive(caller, id);
    let out: { entry: FileEntry; bytes: Uint8Array };
    try {
      out = await this.d.runner.readOutput(c.id, filename);
    } catch (e) {
      throw fromRunner(e, 'output file');
    }
    await this.d.store.appendActivity(
      c.id,
      'FileDownloaded',
      this.d.clock.nowIso(),
      {
        sha512: out.entry.sha512,
        size_bytes: out.entry.size_bytes,
        direction: 'outbound',
      },
      { bytes: out.entry.size_bytes, cap: this.cap },
    );
    return out;
  }
}

/** SHA-512 of the rules as `[kind, value, port]` triples, sorted, as JSON (arrays of primitives: one serialization). */
export function rulesHash(rules: EgressSpec['rules']): string {
  const triples = rules
    .map((r) => [r.kind, r.value, r.port] as const)
    .sort((x, y) => (JSON.stringify(x) < JSON.stringify(y) ? -1 : JSON.stringify(x) > JSON.stringify(y) ? 1 : 0));
  return sha512Prefixed(JSON.stringify(triples));
}
