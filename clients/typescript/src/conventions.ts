// The batch and session conventions over the capsule endpoints: files at fixed
// paths, one capsule per run, destroyed at the end and its proof verified offline.
import type { CallOptions, CapsuleClient } from './client.js';
import { verifyProof, type VerifyResult } from './verify.js';
import type * as T from './types.gen.js';

export const RECORDS_FILE = 'records.jsonl'; // /data/input/records.jsonl
export const RESULTS_FILE = 'results.jsonl'; // /data/output/results.jsonl
export const STATE_FILE = 'state.bin'; // /data/input/state.bin and /data/output/state.bin
/** Capsule metadata key naming the proof a session step continues from. */
export const PARENT_PROOF_KEY = 'parent_proof_id';

export interface BatchRecord {
  custom_id: string;
  [field: string]: unknown;
}

export interface BatchResult {
  custom_id: string;
  status: 'succeeded' | 'errored';
  output: unknown;
  error_code: string | null;
  error_message: string | null;
}

export interface BatchOptions {
  /** A finalized Capsulefile whose entrypoint reads the records; or `command`. */
  capsulefileId?: string;
  command?: string;
  create?: T.CreateCapsuleRequest;
  call?: CallOptions;
}

export interface Finished {
  capsuleId: string;
  destroyed: T.DestroyResult;
  /** Offline verification of the AuditProof returned by destroy. */
  verification: VerifyResult;
}

async function finish(client: CapsuleClient, id: string, call?: CallOptions): Promise<Finished> {
  const destroyed = await client.destroy(id, call);
  return { capsuleId: id, destroyed, verification: verifyProof(destroyed.audit_proof) };
}

/** Runs `records` through one capsule and returns one result per record (in the results file's order). */
export async function runBatch(
  client: CapsuleClient,
  records: BatchRecord[],
  opts: BatchOptions,
): Promise<Finished & { results: BatchResult[]; exec: T.ExecResult }> {
  if (!opts.capsulefileId && !opts.command) throw new Error('runBatch: give capsulefileId or command');
  const ids = new Set<string>();
  for (const r of records) {
    if (typeof r.custom_id !== 'string' || r.custom_id === '')
      throw new Error('runBatch: every record needs a custom_id');
    if (ids.has(r.custom_id)) throw new Error(`runBatch: custom_id ${r.custom_id} is not unique`);
    ids.add(r.custom_id);
  }
  const c = await client.createCapsule(
    { ...opts.create, ...(opts.capsulefileId ? { capsulefile_id: opts.capsulefileId } : {}) },
    opts.call,
  );
  try {
    await client.upload(c.id, RECORDS_FILE, records.map((r) => JSON.stringify(r)).join('\n') + '\n', opts.call);
    const exec = await client.exec(c.id, opts.command ? { command: opts.command } : {}, opts.call);
    if (exec.exit_code !== 0)
      throw new Error(`runBatch: the batch command exited ${exec.exit_code}: ${exec.stderr.slice(0, 500)}`);
    const text = new TextDecoder().decode(await client.download(c.id, RESULTS_FILE, opts.call));
    const results = text
      .split('\n')
      .filter((l) => l.trim() !== '')
      .map((l) => {
        const r = JSON.parse(l) as Partial<BatchResult>;
        return {
          custom_id: String(r.custom_id),
          status: r.status === 'succeeded' ? 'succeeded' : 'errored',
          output: r.output ?? null,
          error_code: r.error_code ?? null,
          error_message: r.error_message ?? null,
        } satisfies BatchResult;
      });
    return { ...(await finish(client, c.id, opts.call)), results, exec };
  } catch (e) {
    await client.destroy(c.id, opts.call).catch(() => undefined);
    throw e;
  }
}

export interface SessionStepOptions {
  command: string;
  /** state.bin from the previous step (null or absent on the first). */
  state?: Uint8Array | null;
  /** proof_id of the previous step, recorded in this capsule's metadata. */
  parentProofId?: string | null;
  create?: T.CreateCapsuleRequest;
  call?: CallOptions;
}

export interface SessionStep extends Finished {
  /** /data/output/state.bin after the command (null when it wrote none). */
  state: Uint8Array | null;
  proofId: string;
  parentProofId: string | null;
  exec: T.ExecResult;
}

/** One step of the session convention: state.bin in, command, state.bin out, destroy, proof. */
export async function runSessionStep(client: CapsuleClient, opts: SessionStepOptions): Promise<SessionStep> {
  const parent = opts.parentProofId ?? null;
  const metadata = {
    ...(opts.create?.metadata as Record<string, string> | undefined),
    ...(parent ? { [PARENT_PROOF_KEY]: parent } : {}),
  };
  const c = await client.createCapsule({ ...opts.create, metadata }, opts.call);
  try {
    if (opts.state) await client.upload(c.id, STATE_FILE, opts.state, opts.call);
    const exec = await client.exec(c.id, { command: opts.command }, opts.call);
    const out = await client.listOutput(c.id, opts.call);
    const state = out.files.some((f) => f.filename === STATE_FILE)
      ? await client.download(c.id, STATE_FILE, opts.call)
      : null;
    const done = await finish(client, c.id, opts.call);
    const record = await client.proof(c.id, opts.call);
    return { ...done, state, proofId: record.proof_id, parentProofId: parent, exec };
  } catch (e) {
    await client.destroy(c.id, opts.call).catch(() => undefined);
    throw e;
  }
}

/** Runs the commands as a chain of session steps, each linked to its parent's proof. */
export async function runSession(
  client: CapsuleClient,
  commands: string[],
  opts: { state?: Uint8Array | null; create?: T.CreateCapsuleRequest; call?: CallOptions } = {},
): Promise<SessionStep[]> {
  const steps: SessionStep[] = [];
  let state = opts.state ?? null;
  let parent: string | null = null;
  for (const command of commands) {
    const s = await runSessionStep(client, {
      command,
      state,
      parentProofId: parent,
      create: opts.create,
      call: opts.call,
    });
    steps.push(s);
    state = s.state;
    parent = s.proofId;
  }
  return steps;
}
