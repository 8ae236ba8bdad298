// Wire types of the control plane <-> sandbox runner protocol (local Unix
// socket, 0600), and one schema per request (zod) the runner parses at its
// edge. No I/O here. The codec and client live in shared/node/, the server
// in sandbox-runner/.
//
// Binary payloads (uploads, downloads) never travel as JSON strings: a frame
// carries a JSON header plus an optional raw body (see shared/node/framing.ts).

import { z } from 'zod';

export const RUNNER_PROTOCOL_VERSION = 1;

/** Facts about the host the runner measured at start; stated in evidence as measured. */
export interface HostFacts {
  kernel: string;
  cgroup_mode: 'v1' | 'v2' | 'hybrid';
  swap_active: boolean;
  /** null when it could not be read (no /proc/cmdline or sysfs entry). */
  init_on_free: boolean | null;
  bwrap_version: string;
}

/**
 * What the node can still admit. Capsule memory (files included: a capsule's
 * tmpfs pages count against its memory_mb) is committed at create and
 * released at destroy; create is refused with `capacity` when it would not fit.
 */
export interface RunnerCapacity {
  /** Memory the node gives capsules in total (runner option node_memory_mb). */
  memory_mb: number;
  /** Sum of memory_mb of live capsules and creates in progress. */
  committed_mb: number;
  free_mb: number;
  capsules: number;
  max_capsules: number;
  /** Bound of the runner's own memory cgroup, and what it is charged now (null: unreadable). */
  runner_memory_mb: number;
  runner_usage_bytes: number | null;
}

/** One live capsule's use of its bounds (GET /v1/capsules/:id reports it). */
export interface CapsuleUsage {
  capsule_id: string;
  /** Bytes used on the capsule's tmpfs (statfs) and its size: storageMbFor(memory_mb). */
  storage_used_bytes: number;
  storage_limit_bytes: number;
  /** Memory charged to the capsule's cgroup (processes and files) and its limit. */
  memory_used_bytes: number | null;
  memory_limit_bytes: number;
}

export interface RunnerHello {
  protocol_version: number;
  host: HostFacts;
  /** Absent only from runners that predate admission control. */
  capacity?: RunnerCapacity;
  /** Capsules found at runner start from before a crash; wiped and removed already. */
  lost: LostCapsule[];
  /** How control planes name this runner, and its placement labels (absent from older runners). */
  node_id?: string;
  labels?: Record<string, string>;
}

export interface LostCapsule {
  capsule_id: string;
  /** Wipe evidence of the recovery, as measured (may be partial). */
  recovered_at: string;
  wipe: WipeReport | null;
  /**
   * What the recovery after the crash measured and did, for the control
   * plane to carry into the capsule's partial proof as evidence. Absent only
   * from runners that predate it.
   */
  recovery?: RecoveryEvidence;
}

/** Recovery of one lost capsule by a restarted runner (hello.lost[].recovery). */
export interface RecoveryEvidence {
  /** Processes found in the capsule's cgroup (a command still running, or left over) and killed. */
  processes_killed: number;
  /** The cgroup was empty after the kill. */
  cgroup_empty: boolean;
  /** The capsule's cgroup directories were removed. */
  cgroup_removed: boolean;
  /** Its tmpfs was still mounted when recovery began (false: nothing to wipe; wipe is null then). */
  tmpfs_was_mounted: boolean;
  /** Wipe of that tmpfs, same shape as a destroy's (also in LostCapsule.wipe). */
  wipe: WipeReport | null;
  tmpfs_unmounted: boolean;
  /** Egress attachment of the capsule, when it had one: relay killed, namespace and proxy socket file removed. */
  egress: { relay_stopped: boolean; netns_removed: boolean; proxy_socket_removed: boolean | null } | null;
  /** The state record and mount point directory are gone. */
  state_removed: boolean;
}

export interface EgressAttachment {
  /** Unix socket on the host the capsule's proxy listens on; bridged into the capsule netns. */
  proxy_socket: string;
  /** PEM bundle of the per-capsule CA, written to tmpfs inside the capsule. */
  ca_pem: string;
}

export interface CreateCapsuleRequest {
  capsule_id: string;
  memory_mb: number;
  /** Label choosing the read-only base image root (default: host system prefix). */
  runtime?: string;
  /** Extra environment for every exec (Capsulefile env_vars). */
  env?: Record<string, string>;
  /** Capsulefile files, mounted read-only at /capsule/app inside. */
  app_files?: { filename: string; content_b64: string }[];
  egress?: EgressAttachment;
  /**
   * Opaque label of the capsule's account (a hash, never the id): the runner divides one CPU weight
   * among an account's live capsules, so a tenant with twenty capsules weighs what one with one does.
   */
  tenant?: string;
}

export interface CreatedCapsule {
  capsule_id: string;
  hostname: string;
  host_uid: number;
  created_at: string;
  /** Size of the capsule's storage (its tmpfs), derived from memory_mb. */
  storage_limit_bytes?: number;
}

export interface ExecRequest {
  capsule_id: string;
  command: string;
  /** Written to a tmpfs file before the command starts; never in argv. base64 of the bytes. */
  input_b64?: string;
  /** Absolute path inside the capsule under /data/input, /data/output or /tmp; default /data/input/data. */
  input_filename?: string;
  timeout_ms: number;
  env?: Record<string, string>;
  /** Working directory of the command: /data (default) or /capsule/app (a Capsulefile entrypoint, next to its files). */
  cwd?: '/data' | '/capsule/app';
  /**
   * Answer in the output-in-body form (ExecResultHeader): stdout and stderr travel as raw UTF-8
   * in the frame body, not JSON-escaped in its header (where a control character costs six bytes
   * to write and to parse). Runners that predate it drop the member and answer the plain form.
   */
  output_in_body?: boolean;
}

export interface ExecResult {
  stdout: string;
  stderr: string;
  stdout_truncated: boolean;
  stderr_truncated: boolean;
  exit_code: number;
  duration_ms: number;
  executed_at: string;
  timed_out: boolean;
  oom_killed: boolean;
  /**
   * Stopped (SIGKILL, exit 137) because its processes kept hitting the capsule's process bound
   * (pids.max); absent from runners that predate it.
   */
  process_limit_killed?: boolean;
  /**
   * `sha512:<hex>` of each stream's UTF-8 as returned, computed in the runner's exec thread so that
   * no serving loop hashes a megabyte of output; absent from runners that predate it, and when
   * the answer cut the stream (the hash would not be of what was returned).
   */
  stdout_sha512?: string;
  stderr_sha512?: string;
}

/** exec's answer header in the output-in-body form: the frame body is stdout then stderr. */
export interface ExecResultHeader extends Omit<ExecResult, 'stdout' | 'stderr'> {
  stdout_bytes: number;
  stderr_bytes: number;
}

export interface FileEntry {
  filename: string;
  size_bytes: number;
  /** "sha512:<hex>" */
  sha512: string;
}

/**
 * An output listing entry: sha512 is null when hashing the file would read
 * more than the capsule tmpfs can hold (a sparse file of enormous apparent
 * size); such a file cannot be downloaded either (it exceeds the read bound).
 */
export interface ListedFile {
  filename: string;
  size_bytes: number;
  sha512: string | null;
}

export interface WipeReport {
  bytes_overwritten: number;
  files: number;
  passes: string[]; // e.g. ["zeros", "ones", "random"]
  readback_verified: boolean; // every byte read back equal to the last pattern written
  /** "sha512:<hex>" RFC 6962-style root over the wiped regions' final zero state */
  zero_state_root: string;
}

/**
 * Evidence objects for chain steps 1..8 as the runner measured them, index = step - 1.
 * Steps the control plane completes (7: activity trail seal) are filled there;
 * the runner sends null at that index.
 */
export type StepEvidence = Record<string, unknown> | null;

export interface DestroyResult {
  capsule_id: string;
  destroyed_at: string;
  evidence: StepEvidence[]; // length 8
  wipe: WipeReport;
  /** Whether a command was running when destroy began, and whether it finished. */
  command_was_running: boolean;
}

/** Request method -> [request, response] for the typed client. */
export interface RunnerMethods {
  hello: [Record<string, never>, RunnerHello];
  create: [CreateCapsuleRequest, CreatedCapsule];
  exec: [ExecRequest, ExecResult];
  /** Body = raw bytes. */
  upload: [{ capsule_id: string; filename: string }, FileEntry];
  list_output: [{ capsule_id: string }, { files: ListedFile[] }];
  /** Response body = raw bytes. */
  read_output: [{ capsule_id: string; filename: string }, FileEntry];
  destroy: [{ capsule_id: string }, DestroyResult];
  list: [Record<string, never>, { capsules: string[] }];
  usage: [{ capsule_id: string }, CapsuleUsage];
}

export { RunnerError, type RunnerErrorCode } from './runner-error.js';

/** What the control plane needs of a runner; implemented by shared/node/runner-client.ts. */
export interface RunnerPort {
  hello(): Promise<RunnerHello>;
  create(req: CreateCapsuleRequest): Promise<CreatedCapsule>;
  exec(req: ExecRequest): Promise<ExecResult>;
  upload(capsuleId: string, filename: string, bytes: Uint8Array): Promise<FileEntry>;
  listOutput(capsuleId: string): Promise<ListedFile[]>;
  readOutput(capsuleId: string, filename: string): Promise<{ entry: FileEntry; bytes: Uint8Array }>;
  destroy(capsuleId: string): Promise<DestroyResult>;
  list(): Promise<string[]>;
  /** Storage and memory use of one live capsule (optional: in-process test runners may lack it). */
  usage?(capsuleId: string): Promise<CapsuleUsage>;
  /** Several runners behind this port: those reachable now, by node id (per-node reconciliation, metrics). */
  nodes?(): RunnerMember[];
  close(): Promise<void>;
}

/** One reachable runner of several, as of its last hello. */
export interface RunnerMember {
  node_id: string;
  runner: RunnerPort;
  hello: RunnerHello;
}

// Request shapes. Only types and presence are checked here; bounds that depend
// on the runner's configuration (sizes, ranges, names) are checked by the
// runner after parsing, with messages naming the field. Unknown members are dropped.
const capsuleRef = z.object({ capsule_id: z.string() });
const env = z.record(z.string(), z.string()).nullish();
const empty = z.object({}) as z.ZodType<Record<string, never>>;

/** One schema per runner method, typed by the method's request. */
export const RUNNER_REQUEST_SCHEMAS: { [K in keyof RunnerMethods]: z.ZodType<RunnerMethods[K][0]> } = {
  hello: empty,
  create: z.object({
    capsule_id: z.string(),
    memory_mb: z.number(),
    runtime: z.string().optional(),
    env: env.transform((v) => v ?? undefined),
    app_files: z.array(z.object({ filename: z.string(), content_b64: z.string() })).optional(),
    egress: z
      .object({ proxy_socket: z.string(), ca_pem: z.string() })
      .nullish()
      .transform((v) => v ?? undefined),
    tenant: z.string().optional(),
  }),
  exec: z.object({
    capsule_id: z.string(),
    command: z.string(),
    input_b64: z
      .string()
      .nullish()
      .transform((v) => v ?? undefined),
    input_filename: z.string().optional(),
    timeout_ms: z.number(),
    env: env.transform((v) => v ?? undefined),
    cwd: z.enum(['/data', '/capsule/app']).optional(),
    output_in_body: z.boolean().optional(),
  }),
  upload: capsuleRef.extend({ filename: z.string() }),
  list_output: capsuleRef,
  read_output: capsuleRef.extend({ filename: z.string() }),
  destroy: capsuleRef,
  list: empty,
  usage: capsuleRef,
};

/** The first problem of a failed parse as "<field>: <what>" (field like app_files[0].filename). */
export function describeIssue(error: z.ZodError): string {
  const issue = error.issues[0];
  if (!issue) return 'params: invalid';
  const path = issue.path
    .map((p, i) => (typeof p === 'number' ? `[${p}]` : i === 0 ? String(p) : `.${String(p)}`))
    .join('');
  return `${path || 'params'}: ${issue.message}`;
}
