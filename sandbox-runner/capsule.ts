// Capsule lifecycle manager: sequences the steps of create (admission, uid,
// state record, cgroup, tmpfs, egress), exec (one fresh bwrap per exec over
// the same tmpfs, serialized per capsule), file transfer and destroy (kill,
// wipe, zeroize, unmount, release, evidence). Request decoding lives in
// request-checks.ts, the on-disk record in state-record.ts.
import { createHash } from 'node:crypto';
import { chmodSync, chownSync, mkdirSync, readFileSync, statfsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import {
  RunnerError,
  type CreateCapsuleRequest,
  type CapsuleUsage,
  type CreatedCapsule,
  type DestroyResult,
  type ExecRequest,
  type FileEntry,
  type HostFacts,
  type RunnerCapacity,
  type ListedFile,
} from '../shared/runner-protocol.js';
import { writeCharged, type WriterRun } from './charged.js';
import {
  cpuUsageMs,
  groupPids,
  killGroup,
  removeGroup,
  writerProcsFiles,
  type CapsuleCgroupPaths,
  type CgroupManager,
} from './cgroup.js';
import type { Clock, Random } from './clock.js';
import type { RunnerConfig } from './config.js';
import { buildEvidence } from './evidence.js';
import type { ExecAnswer, SandboxObservation } from './exec.js';
import { ExecHost, type PreparedRef } from './exec-host.js';
import { validateFilename } from './files.js';
import { mountinfoOfAsync, processesOwnedBy, swapActive, type NsName } from './host.js';
import { baseEnv, EXEC_DIR, type SandboxSpec } from './sandbox.js';
import type { Mounter } from './tmpfs.js';
import type { UidPool } from './uids.js';
import { FileWorkers, type JobOwner } from './offloop.js';
import { wipeAndZeroize } from './wipe.js';
import { caBundle, egressEnv, netnsPath, type EgressState } from './egress.js';
import { checkCreate, checkExec, validateCapsuleId } from './request-checks.js';
import { capsulesDir, removeState, tmpfsDirOf, writeRecord, type CapsuleRecord } from './state-record.js';
import { LightTenants } from './light-tenants.js';
import type { CopyLease, PrivateBind, PrivateCopies } from './private-copies.js';

/** The CA bundle file of an egress capsule, at the tmpfs root (bound read-only inside). */
const EGRESS_CA_FILE = 'egress-ca.pem';

interface Capsule {
  record: CapsuleRecord;
  memoryMb: number;
  storageMb: number;
  hostname: string;
  imageRoot: string;
  etcDir: string;
  env: Record<string, string>;
  hasApp: boolean;
  key: Buffer;
  state: 'live' | 'destroying';
  queue: Promise<unknown>;
  running: number;
  abortRunning: (() => void) | null;
  observations: SandboxObservation[];
  execCount: number;
  /** The wrapper of the next exec, started ahead of time (see sandbox.ts). */
  prepared: PreparedRef | null;
  /** The writer of the next upload or exec input, started ahead of time (see charged.ts). */
  writer: PreparedRef | null;
  /** The account's opaque label (create's `tenant`); null: the capsule weighs alone. */
  tenant: string | null;
  /** Its tenant's copies of the files every process maps, held until destroy. */
  copies: CopyLease | null;
  privateFiles: readonly PrivateBind[];
}

export interface ManagerDeps {
  config: RunnerConfig;
  cgroups: CgroupManager;
  uids: UidPool;
  clock: Clock;
  random: Random;
  host: HostFacts;
  hostNamespaces: Partial<Record<NsName, string>>;
  mounter: Mounter;
  /** Compiled seccomp program on disk (opened once per exec for bwrap's fd 3). */
  seccompPath: string;
  /** bwrap arguments masking host /proc entries (sandbox.ts procMaskArgs). */
  procMask?: string[];
  /** Each tenant's copies of the loader, libc and shell; absent: capsules map the image's own. */
  copies?: PrivateCopies;
}

/** How long a capsule stays idle after its first exec before its second exec's sandbox is set up. */
const SECOND_SANDBOX_AFTER_MS = 250;

/** Where prepareEtc put the /etc of an image root (one per distinct root). */
export function etcDirFor(stateDir: string, imageRoot: string): string {
  return join(stateDir, 'etc', createHash('sha256').update(imageRoot).digest('hex').slice(0, 16));
}

/** Zeroes customer bytes still held here; bytes moved to the exec thread are zeroed there once written. */
function zeroBytes(b: Uint8Array): void {
  if (b.buffer.byteLength > 0) b.fill(0); // a moved (detached) buffer reads as empty
}

export class CapsuleManager {
  private readonly capsules = new Map<string, Capsule>();
  /** Ids whose create is in progress (create awaits the egress relay). */
  private readonly creating = new Set<string>();
  /** Customer bytes held by the runner while their writer copies them in (bounded, see upload). */
  private inflightBytes = 0;
  /** memory_mb of creates in progress (committed before their capsule is live). */
  private readonly creatingMb = new Map<string, number>();
  private shuttingDown = false;
  /** Listing, reads and wipes run in worker threads, never on this event loop. */
  private readonly files = new FileWorkers();
  /** Execs (process start, pipes, timeouts) run in a worker thread, never on this event loop. */
  private readonly execs: ExecHost;
  /** Tenants light on exec time: their execs run in the quick lane (cgroup.ts placeCpu) and go first in the exec thread. */
  private readonly light: LightTenants;

  constructor(private readonly d: ManagerDeps) {
    this.light = new LightTenants(d.clock);
    this.execs = new ExecHost((key) => this.light.isLight(key));
    this.files.warm();
    mkdirSync(capsulesDir(d.config.stateDir), { recursive: true, mode: 0o711 });
    chmodSync(capsulesDir(d.config.stateDir), 0o711);
  }

  ids(): string[] {
    return [...this.capsules.keys()];
  }

  /** Memory committed to live capsules and creates in progress (MB). */
  committedMb(): number {
    let mb = 0;
    for (const c of this.capsules.values()) mb += c.memoryMb;
    for (const m of this.creatingMb.values()) mb += m;
    return mb;
  }

  capacity(runnerUsageBytes: number | null): RunnerCapacity {
    const { config } = this.d;
    const committed = this.committedMb();
    return {
      memory_mb: config.nodeMemoryMb,
      committed_mb: committed,
      free_mb: Math.max(0, config.nodeMemoryMb - committed),
      capsules: this.capsules.size + this.creating.size,
      max_capsules: config.bounds.maxCapsules,
      runner_memory_mb: config.runnerMemoryMb,
      runner_usage_bytes: runnerUsageBytes,
    };
  }

  private get(capsuleId: unknown): Capsule {
    const id = validateCapsuleId(capsuleId);
    const c = this.capsules.get(id);
    if (!c) throw new RunnerError('not_found', `capsule_id: no live capsule ${id}`);
    if (c.state === 'destroying') throw new RunnerError('busy', `capsule_id: capsule ${id} is being destroyed`);
    return c;
  }

  async create(req: CreateCapsuleRequest): Promise<CreatedCapsule> {
    const { config } = this.d;
    if (this.shuttingDown) throw new RunnerError('unavailable', 'runner is shutting down');
    const plan = checkCreate(req, config);
    const { id, memoryMb: mem, storageMb, imageRoot, env, apps, egress, tenant } = plan;
    const queueKey = tenant ?? id; // tenantKey() once the capsule exists
    // Customer bytes: every decoded app file is zeroed however create ends (refusal, failure or success).
    try {
      if (this.capsules.has(id) || this.creating.has(id))
        throw new RunnerError('invalid', `capsule_id: ${id} already exists`);
      if (this.capsules.size + this.creating.size >= config.bounds.maxCapsules)
        throw new RunnerError('capacity', 'runner is at its capsule limit');
      // Admission: the node must be able to back the capsule's memory, its files included.
      const committed = this.committedMb();
      if (committed + mem > config.nodeMemoryMb)
        throw new RunnerError(
          'capacity',
          `memory_mb: the node cannot back ${mem} MB now (${config.nodeMemoryMb - committed} of ${config.nodeMemoryMb} MB free)`,
        );
      const uid = this.d.uids.allocate();
      if (uid === null) throw new RunnerError('capacity', 'no free capsule uid in the configured range');
      const tmpfsDir = tmpfsDirOf(config.stateDir, id);
      const record: CapsuleRecord = {
        capsule_id: id,
        host_uid: uid,
        tmpfs_dir: tmpfsDir,
        cgroup: this.d.cgroups.pathsFor(id),
        created_at: this.d.clock.iso(),
      };
      const hostname = `capsule-${this.d.random.bytes(6).toString('hex')}`;
      let mounted = false;
      let cgroupMade = false;
      let copies: CopyLease | null = null;
      let privateFiles: readonly PrivateBind[] = [];
      let egressState: EgressState | null = null;
      let writer: PreparedRef | null = null;
      this.creating.add(id);
      this.creatingMb.set(id, mem);
      try {
        // The record goes first so that a crash from here on is found by recovery.
        writeRecord(record);
        // The cgroup first: the app files below are charged to it.
        await this.d.cgroups.create(id, {
          memoryBytes: mem * 1024 * 1024,
          pidsMax: config.bounds.pidsMax,
          cpuWeight: config.bounds.cpuWeight,
        });
        cgroupMade = true;
        // The first upload's writer (a shell waiting in the capsule's writer leaf, charged to the
        // capsule) starts now, its spawn and cgroup joins beside the mount below: started at the
        // end of create, it was still starting when the upload came (measured in the soak: 11-14 ms
        // old, the upload waiting 12-29 ms for it). Next ones: takeWriter.
        writer = this.startWriter(queueKey, record.cgroup);
        mkdirSync(tmpfsDir, { mode: 0o711 });
        await this.d.mounter.mount(tmpfsDir, storageMb, config.bounds.tmpfsInodes);
        mounted = true;
        for (const sub of ['input', 'output', 'tmp']) {
          mkdirSync(join(tmpfsDir, sub), { mode: 0o700 });
          chownSync(join(tmpfsDir, sub), uid, uid);
        }
        // Root's: each exec's script is written here, seen read-only inside (sandbox.ts).
        mkdirSync(join(tmpfsDir, EXEC_DIR), { mode: 0o755 });
        copies = this.d.copies?.acquire(queueKey, imageRoot) ?? null;
        if (copies) privateFiles = await copies.binds;
        if (apps.length > 0) {
          const app = join(tmpfsDir, 'app');
          mkdirSync(app, { mode: 0o755 });
          await writeCharged(
            0,
            apps.map((a) => ({ dir: app, name: a.name, bytes: a.bytes, field: 'app_files.filename', hash: false })),
            this.writerRun(queueKey, writerProcsFiles(record.cgroup), null),
          );
        }
        if (egress) {
          writeFileSync(join(tmpfsDir, EGRESS_CA_FILE), caBundle(imageRoot, egress.caPem), { mode: 0o644 });
          record.egress = {
            netns: `capsule-${this.d.random.bytes(8).toString('hex')}`,
            relay_pid: null,
            proxy_socket: egress.proxySocket,
          };
          // Record the namespace name before creating it, and the relay pid once it runs (recovery).
          writeRecord(record);
          egressState = await this.execs.attachEgress(queueKey, record.egress.netns, egress.proxySocket);
          record.egress = { ...egressState, proxy_socket: egress.proxySocket };
          writeRecord(record);
        }
      } catch (e) {
        this.creating.delete(id);
        this.creatingMb.delete(id);
        if (egressState) await this.execs.detachEgress(queueKey, egressState);
        else if (record.egress) await this.execs.detachEgress(queueKey, record.egress);
        await this.execs.drop(writer);
        if (mounted) {
          wipeAndZeroize(tmpfsDir, this.d.random.bytes(32));
          await this.d.mounter.unmount(tmpfsDir);
        }
        if (cgroupMade) await killGroup(record.cgroup).then(() => removeGroup(record.cgroup));
        copies?.release();
        await removeState(tmpfsDir, true);
        this.d.uids.release(uid);
        if (e instanceof RunnerError) throw e;
        const code = (e as NodeJS.ErrnoException).code;
        if (code === 'ENOSPC') throw new RunnerError('no_space', 'app_files: do not fit the capsule tmpfs');
        throw new RunnerError('internal', `create failed: ${code ?? (e as Error).message}`);
      }
      this.creating.delete(id);
      this.creatingMb.delete(id);
      this.capsules.set(id, {
        record,
        memoryMb: mem,
        storageMb,
        hostname,
        imageRoot,
        etcDir: etcDirFor(config.stateDir, imageRoot),
        env: { ...baseEnv(hostname), ...(egressState ? egressEnv() : {}), ...env },
        hasApp: apps.length > 0,
        key: this.d.random.bytes(32),
        state: 'live',
        queue: Promise.resolve(),
        running: 0,
        abortRunning: null,
        observations: [],
        execCount: 0,
        prepared: null,
        writer,
        tenant,
        copies,
        privateFiles,
      });
      const made = this.capsules.get(id)!;
      this.reweigh(tenant);
      made.prepared = this.prepare(made);
      return {
        capsule_id: id,
        hostname,
        host_uid: uid,
        created_at: record.created_at,
        storage_limit_bytes: storageMb * 1024 * 1024,
      };
    } finally {
      for (const a of apps) zeroBytes(a.bytes);
    }
  }

  private spec(c: Capsule): SandboxSpec {
    return {
      tmpfsDir: c.record.tmpfs_dir,
      imageRoot: c.imageRoot,
      etcDir: c.etcDir,
      hostUid: c.record.host_uid,
      hostname: c.hostname,
      hasApp: c.hasApp,
      netnsPath: this.netns(c),
      caFile: c.record.egress ? join(c.record.tmpfs_dir, EGRESS_CA_FILE) : null,
      procMask: this.d.procMask ?? [],
      privateFiles: c.privateFiles,
    };
  }

  /** The capsule's network namespace when it has sealed egress (its execs enter it). */
  private netns(c: Capsule): string | null {
    return c.record.egress ? netnsPath(c.record.egress.netns) : null;
  }

  /**
   * The next exec's wrapper. Its sandbox is set up ahead for a capsule's first exec (or destroy's
   * probe: one is always used) and once a capsule has run two; after the first, only once the
   * capsule has stayed idle SECOND_SANDBOX_AFTER_MS. A capsule that runs one exec and is destroyed
   * (create, upload, exec, download, destroy) would otherwise have every node-wide mount lock taken
   * twice for it; one that is used interactively waits longer than that between execs.
   */
  private prepare(c: Capsule): PreparedRef {
    const ahead = c.execCount === 0 || c.execCount >= 2;
    const ref = this.execs.prepare(
      this.tenantKey(c),
      c.record.cgroup,
      this.isLight(c),
      this.spec(c),
      this.d.seccompPath,
      ahead,
      c.observations.length === 0, // its exec (or destroy's probe) is observed, as execute() decides
    );
    if (!ahead)
      setTimeout(() => {
        if (c.prepared === ref && c.state === 'live' && c.running === 0) this.execs.setUpAhead(ref);
      }, SECOND_SANDBOX_AFTER_MS).unref();
    return ref;
  }

  /** A writer waiting for a capsule's next write (called while create still runs: no Capsule yet). */
  private startWriter(key: string, cgroup: CapsuleCgroupPaths): PreparedRef {
    return this.execs.prepareWriter(key, this.writerProcs(key, cgroup));
  }

  /** The cgroups a writer of a capsule joins (its CPU in the quick lane while its tenant, key, is light). */
  private writerProcs(key: string, cgroup: CapsuleCgroupPaths): string[] {
    return writerProcsFiles(cgroup, this.light.isLight(key));
  }

  /** A write through the exec thread's writer (prepared, or started for it). */
  private writerRun(queueKey: string, writerProcs: string[], prepared: PreparedRef | null): WriterRun {
    return (header, chunks, hash) => this.execs.write(queueKey, writerProcs, prepared, header, chunks, hash);
  }

  /** A write into a live capsule, through its prepared writer. */
  private capsuleWriter(c: Capsule): WriterRun {
    const key = this.tenantKey(c);
    return this.writerRun(key, this.writerProcs(key, c.record.cgroup), this.takeWriter(c));
  }

  /** The prepared writer for one write; the next one is started once this call is on its way. */
  private takeWriter(c: Capsule): PreparedRef | null {
    const w = c.writer;
    c.writer = null;
    setImmediate(() => {
      if (c.state === 'live' && !c.writer) c.writer = this.startWriter(this.tenantKey(c), c.record.cgroup);
    });
    return w;
  }

  private observe(c: Capsule, o: SandboxObservation): void {
    if (c.observations.length === 0) c.observations.push(o);
  }

  async exec(req: ExecRequest): Promise<ExecAnswer> {
    const { bounds } = this.d.config;
    if (typeof req !== 'object' || req === null) throw new RunnerError('invalid', 'params: must be an object');
    const c = this.get(req.capsule_id);
    const { env, cwd, input } = checkExec(req, { tmpfsDir: c.record.tmpfs_dir, hasApp: c.hasApp }, bounds);

    const run = async (): Promise<ExecAnswer> => {
      if (c.state !== 'live') {
        if (input) zeroBytes(input.bytes);
        throw new RunnerError('busy', `capsule_id: capsule ${c.record.capsule_id} is being destroyed`);
      }
      c.running++;
      // Decided as this exec starts (light-tenants.ts): it counts from 0 ms, and a tenant's second
      // exec running at once is not light.
      const ran = this.light.start(this.tenantKey(c));
      const quick = this.isLight(c);
      // A capsule's execs run one at a time: what its group used meanwhile is this exec's CPU.
      const cpuBefore = cpuUsageMs(c.record.cgroup);
      try {
        if (input) {
          try {
            await writeCharged(
              c.record.host_uid,
              [{ dir: input.dir, name: input.name, bytes: input.bytes, field: 'input_filename', hash: false }],
              this.capsuleWriter(c),
            );
          } finally {
            zeroBytes(input.bytes);
          }
        }
        const executedAt = this.d.clock.iso();
        const prepared = c.prepared;
        c.prepared = null;
        const r = await this.execs.run(this.tenantKey(c), {
          spec: this.spec(c),
          script: { command: req.command, env: { ...c.env, ...env }, ...(cwd === undefined ? {} : { cwd }) },
          cgroup: c.record.cgroup,
          seccompPath: this.d.seccompPath,
          prepared,
          timeoutMs: req.timeout_ms,
          killGraceMs: bounds.killGraceMs,
          maxOutputBytes: bounds.maxOutputBytes,
          // The first exec is observed (namespaces, mount table); later ones run unobserved (speed).
          ...(c.observations.length === 0 ? { observe: (o: SandboxObservation) => this.observe(c, o) } : {}),
          onStart: (abort) => {
            c.abortRunning = abort;
          },
          quick,
        });
        c.execCount++; // counted once it ran: evidence step 1 reports this number
        return {
          output: r.output,
          stdout_truncated: r.stdout_truncated,
          stderr_truncated: r.stderr_truncated,
          ...(r.stdout_sha512 ? { stdout_sha512: r.stdout_sha512 } : {}),
          ...(r.stderr_sha512 ? { stderr_sha512: r.stderr_sha512 } : {}),
          exit_code: r.exit_code,
          duration_ms: r.duration_ms,
          executed_at: executedAt,
          timed_out: r.timed_out,
          oom_killed: r.oom_killed,
          process_limit_killed: r.process_limit_killed === true,
        };
      } finally {
        const cpuAfter = cpuBefore === null ? null : cpuUsageMs(c.record.cgroup);
        ran(cpuAfter === null || cpuBefore === null ? null : cpuAfter - cpuBefore);
        c.abortRunning = null;
        c.running--;
        // Start the next exec's wrapper after the sweep, once this result is on its way (spawn is synchronous).
        setImmediate(() => {
          if (c.state === 'live' && !c.prepared && c.running === 0) c.prepared = this.prepare(c);
        });
      }
    };
    const p = c.queue.then(run, run);
    c.queue = p.catch(() => undefined);
    return p;
  }

  async upload(params: { capsule_id: string; filename: string }, body: Buffer): Promise<FileEntry> {
    try {
      const c = this.get(params?.capsule_id);
      const name = validateFilename(params.filename);
      if (body.length > this.d.config.bounds.maxUploadBytes)
        throw new RunnerError('too_large', `body: larger than ${this.d.config.bounds.maxUploadBytes} bytes`);
      // The runner's own memory is bounded (runner_memory_mb): concurrent uploads may hold at most
      // a quarter of it; past that they are refused for a retry rather than risk the runner.
      const bound = Math.floor((this.d.config.runnerMemoryMb * 1024 * 1024) / 4);
      // Read now: the write moves the bytes to the exec thread (body reads as empty afterwards).
      const size = body.length;
      if (this.inflightBytes + size > bound)
        throw new RunnerError('capacity', 'body: too many uploads in flight on this node; retry shortly');
      this.inflightBytes += size;
      try {
        const [entry] = await writeCharged(
          c.record.host_uid,
          [{ dir: join(c.record.tmpfs_dir, 'input'), name, bytes: body, field: 'filename', hash: true }],
          this.capsuleWriter(c),
        );
        return entry!;
      } catch (e) {
        // A destroy that began meanwhile killed the writer: say so, not "full".
        if (c.state !== 'live')
          throw new RunnerError('busy', `capsule_id: capsule ${c.record.capsule_id} is being destroyed`);
        throw e;
      } finally {
        this.inflightBytes -= size;
      }
    } finally {
      zeroBytes(body); // also when refused: the customer's bytes never outlive the call
    }
  }

  usage(params: { capsule_id: string }): CapsuleUsage {
    const c = this.get(params?.capsule_id);
    const fs = statfsSync(c.record.tmpfs_dir);
    const cg = c.record.cgroup;
    let memUsed: number | null = null;
    try {
      memUsed = Number(
        readFileSync(join(cg.memory, cg.mode === 'v2' ? 'memory.current' : 'memory.usage_in_bytes'), 'utf8').trim(),
      );
    } catch {
      memUsed = null;
    }
    return {
      capsule_id: c.record.capsule_id,
      storage_used_bytes: (fs.blocks - fs.bfree) * fs.bsize,
      storage_limit_bytes: c.storageMb * 1024 * 1024,
      memory_used_bytes: memUsed,
      memory_limit_bytes: c.memoryMb * 1024 * 1024,
    };
  }

  /** Whose a file job is and what it must go through: the bytes on the capsule's tmpfs now (unknown: large). */
  private jobOwner(c: Capsule): JobOwner {
    let bytes = Number.MAX_SAFE_INTEGER;
    let files = Number.MAX_SAFE_INTEGER;
    try {
      const fs = statfsSync(c.record.tmpfs_dir);
      bytes = (fs.blocks - fs.bfree) * fs.bsize;
      files = fs.files - fs.ffree;
    } catch {
      /* unmeasured: treated as large */
    }
    return { capsule: c.record.capsule_id, tenant: this.tenantKey(c), bytes, files };
  }

  /** Its tenant has been light on exec time lately: its processes run in the quick lane (light-tenants.ts). */
  private isLight(c: Capsule): boolean {
    return this.light.isLight(this.tenantKey(c));
  }

  /** Whose turn a capsule's work waits for (file jobs, the exec thread): its tenant, or the capsule alone. */
  private tenantKey(c: Capsule): string {
    return c.tenant ?? c.record.capsule_id;
  }

  async listOutput(params: { capsule_id: string }): Promise<{ files: ListedFile[] }> {
    const c = this.get(params?.capsule_id);
    // Hash at most what the tmpfs can hold: more can only be holes of sparse files.
    const budget = this.d.config.bounds.tmpfsMb * 1024 * 1024;
    return { files: await this.files.list(this.jobOwner(c), join(c.record.tmpfs_dir, 'output'), budget) };
  }

  async readOutput(params: { capsule_id: string; filename: string }): Promise<{ entry: FileEntry; bytes: Buffer }> {
    const c = this.get(params?.capsule_id);
    const name = validateFilename(params.filename);
    const dir = join(c.record.tmpfs_dir, 'output');
    return this.files.read(this.jobOwner(c), dir, name, this.d.config.bounds.maxReadBytes);
  }

  async destroy(params: { capsule_id: string }): Promise<DestroyResult> {
    const c = this.get(params?.capsule_id);
    c.state = 'destroying';
    const commandWasRunning = c.running > 0;
    c.abortRunning?.();
    await c.queue;
    if (c.observations.length === 0) {
      // Never executed: observe the capsule's sandbox once so step 1/2 rest on a measurement.
      const prepared = c.prepared;
      c.prepared = null;
      await this.execs
        .run(this.tenantKey(c), {
          spec: this.spec(c),
          script: { command: 'true', env: c.env },
          cgroup: c.record.cgroup,
          seccompPath: this.d.seccompPath,
          prepared,
          timeoutMs: 5000,
          killGraceMs: 100,
          maxOutputBytes: 1024,
          observe: (o) => this.observe(c, o),
          observeKind: 'destroy_probe',
        })
        .catch(() => undefined);
    }
    // The waiting wrapper and writer are killed now; teardown waits for them only before it removes
    // the cgroups (tens of ms on a busy node: the spawner may still be starting them). Neither has
    // touched the capsule's files (they wait for "go" and for a header), and one that joins a
    // cgroup after the sweep is dead before the removal.
    const dropped = Promise.all([this.execs.drop(c.prepared), this.execs.drop(c.writer)]);
    c.prepared = null;
    c.writer = null;
    // WARNING: if teardown throws, the capsule stays 'destroying' (every later call gets busy)
    // until the runner restarts and recovery wipes it; teardown's steps therefore report, not throw.
    const result = await this.teardown(c, commandWasRunning, dropped);
    this.capsules.delete(c.record.capsule_id);
    this.reweigh(c.tenant);
    c.copies?.release();
    return result;
  }

  /**
   * One account weighs one capsule's CPU weight however many capsules it runs: each of its n live
   * capsules gets cpu_weight / n (so twenty capsules of one tenant cannot take twenty shares).
   */
  private reweigh(tenant: string | null): void {
    if (tenant === null) return;
    const mine = [...this.capsules.values()].filter((c) => c.tenant === tenant && c.state === 'live');
    for (const c of mine) this.d.cgroups.setCpuWeight(c.record.cgroup, this.d.config.bounds.cpuWeight / mine.length);
  }

  /** Teardown's file branch: the tmpfs as mounted, its wipe, its unmount, the state directory's removal. */
  private async wipeAndUnmount(c: Capsule) {
    const r = c.record;
    // Read while the wipe runs (neither changes the mount): the line says what was mounted before it.
    const mountBefore = mountinfoOfAsync('self').then((m) => m.find((x) => x.mount_point === r.tmpfs_dir) ?? null);
    let wipe: Awaited<ReturnType<FileWorkers['wipe']>>;
    try {
      wipe = await this.files.wipe(this.jobOwner(c), r.tmpfs_dir, c.key, {
        sparseHelper: this.d.config.wipeSparseHelper,
      });
    } catch (e) {
      // No worker could run it: wipe here (blocks this loop, but the bytes are never left behind).
      process.stderr.write(`runner: wipe worker failed (${(e as Error)?.message}); wiping on the main thread\n`);
      // The capsule key was already zeroized when the job was handed over: this wipe keys a fresh one.
      c.key.fill(0);
      wipe = wipeAndZeroize(r.tmpfs_dir, this.d.random.bytes(32), { sparseHelper: this.d.config.wipeSparseHelper });
      wipe.keyReadbackZero = wipe.keyReadbackZero && c.key.every((b) => b === 0);
    }
    const tmpfsMountBefore = await mountBefore;
    const unmount = await this.d.mounter.unmount(r.tmpfs_dir);
    let stateRemoved = false;
    try {
      await removeState(r.tmpfs_dir, unmount.gone);
      stateRemoved = true;
    } catch {
      stateRemoved = false;
    }
    return { tmpfsMountBefore, wipe, unmount, stateRemoved };
  }

  private async teardown(c: Capsule, commandWasRunning: boolean, dropped: Promise<unknown>): Promise<DestroyResult> {
    const r = c.record;
    // Its processes only have to die now: at full weight, a dying capsule on a busy node is not
    // queued behind every other tenant's CPU to do so (nothing it runs gets another instruction).
    this.d.cgroups.setCpuWeight(r.cgroup, 10_000);
    const cgEmpty = await killGroup(r.cgroup);
    // Its processes are dead: what follows runs side by side, since each branch mostly waits for a
    // different host-wide kernel lock (network namespaces, mounts, cgroups) that other capsules'
    // sandboxes hold for tens of ms on a busy node.
    const egressDone = r.egress ? this.execs.detachEgress(this.tenantKey(c), r.egress) : Promise.resolve(null);
    const groupRemoved = dropped.then(() => (cgEmpty ? removeGroup(r.cgroup) : false));
    const files = this.wipeAndUnmount(c);
    const [egress, removed, { tmpfsMountBefore, wipe, unmount, stateRemoved }] = await Promise.all([
      egressDone,
      groupRemoved,
      files,
    ]);
    const unmounted = unmount.gone;
    const keyZero = wipe.keyReadbackZero;
    const owned = processesOwnedBy(r.host_uid);
    const released = owned.pids.length === 0;
    if (released) this.d.uids.release(r.host_uid);
    const host: HostFacts = { ...this.d.host, swap_active: swapActive(this.d.config.procSwaps) };
    const evidence = buildEvidence({
      capsuleId: r.capsule_id,
      host,
      hostNamespaces: this.d.hostNamespaces,
      observations: c.observations,
      execCount: c.execCount,
      tmpfsMountBefore,
      wipe: wipe.report,
      wipeRegions: wipe.regions,
      wipeSkippedNonRegular: wipe.skipped_non_regular,
      wipeErrors: wipe.errors,
      wipeHardLinksDeduplicated: wipe.hard_links_deduplicated,
      wipeNotOverwritten: wipe.not_overwritten,
      wipeReason: wipe.reason,
      tmpfsCapacityBytes: wipe.tmpfs_capacity_bytes,
      tmpfsUsedBytes: wipe.tmpfs_used_bytes,
      key: { bytes: c.key.length, zeroized: true, readback_all_zero: keyZero },
      uid: {
        host_uid: r.host_uid,
        processes_after: owned.pids.length,
        zombies_after: owned.zombies,
        processes_scanned: owned.scanned,
        released,
      },
      cgroup: { mode: r.cgroup.mode, empty: cgEmpty && groupPids(r.cgroup).length === 0, removed },
      tmpfsUnmounted: unmounted,
      tmpfsDetachedLazily: unmount.lazy,
      stateRemoved,
      commandWasRunning,
      egress,
    });
    return {
      capsule_id: r.capsule_id,
      destroyed_at: this.d.clock.iso(),
      evidence,
      wipe: wipe.report,
      command_was_running: commandWasRunning,
    };
  }

  /** Graceful stop: refuse new work, destroy every live capsule. */
  async shutdown(): Promise<void> {
    this.shuttingDown = true;
    for (const id of this.ids()) {
      try {
        await this.destroy({ capsule_id: id });
      } catch {
        /* recovery on next start covers it */
      }
    }
    await this.execs.close();
  }
}
