// Request decoding for the lifecycle calls. The protocol schemas
// (shared/runner-protocol.ts) have accepted the shape at the runner's edge;
// these checks add what depends on this runner's configuration (bounds,
// runtimes) and decode customer bytes. Each check is one line of the list
// and throws a RunnerError naming the field; nothing here touches the host.
import { join } from 'node:path';
import { RunnerError, type CreateCapsuleRequest, type ExecRequest } from '../shared/runner-protocol.js';
import { storageMbFor, type RunnerConfig } from './config.js';
import { validateEgress } from './egress.js';
import { validateFilename } from './files.js';
import { CAPSULE_ID_RE } from './state-record.js';

const ENV_NAME_RE = /^[A-Za-z_][A-Za-z0-9_]{0,127}$/;
const INPUT_DIRS: Record<string, string> = { '/data/input/': 'input', '/data/output/': 'output', '/tmp/': 'tmp' };

export function validateCapsuleId(id: unknown): string {
  if (typeof id !== 'string' || !CAPSULE_ID_RE.test(id))
    throw new RunnerError('invalid', 'capsule_id: 1-64 of [A-Za-z0-9_-], starting alphanumeric');
  return id;
}

export function validateEnv(env: unknown, field: string): Record<string, string> {
  if (env === undefined || env === null) return {};
  if (typeof env !== 'object' || Array.isArray(env))
    throw new RunnerError('invalid', `${field}: must be an object of strings`);
  const out: Record<string, string> = {};
  let total = 0;
  const entries = Object.entries(env as Record<string, unknown>);
  if (entries.length > 256) throw new RunnerError('invalid', `${field}: more than 256 variables`);
  for (const [k, v] of entries) {
    if (!ENV_NAME_RE.test(k))
      throw new RunnerError('invalid', `${field}: invalid variable name ${JSON.stringify(k.slice(0, 64))}`);
    if (typeof v !== 'string' || v.includes('\0'))
      throw new RunnerError('invalid', `${field}.${k}: must be a string without NUL`);
    total += k.length + v.length;
    out[k] = v;
  }
  if (total > 256 * 1024) throw new RunnerError('invalid', `${field}: larger than 256 KiB`);
  return out;
}

/** Customer bytes: the caller zeroes the returned buffer once it is written. */
function decodeB64(s: unknown, field: string, max: number): Buffer {
  if (typeof s !== 'string' || !/^[A-Za-z0-9+/]*={0,2}$/.test(s) || s.length % 4 !== 0) {
    throw new RunnerError('invalid', `${field}: must be standard base64`);
  }
  if ((s.length / 4) * 3 > max + 3) throw new RunnerError('too_large', `${field}: larger than ${max} bytes`);
  const b = Buffer.from(s, 'base64');
  if (b.length > max) {
    b.fill(0);
    throw new RunnerError('too_large', `${field}: larger than ${max} bytes`);
  }
  return b;
}

/** A create request, checked and decoded; `apps` holds customer bytes the caller zeroes. */
export interface CreatePlan {
  id: string;
  memoryMb: number;
  storageMb: number;
  imageRoot: string;
  env: Record<string, string>;
  apps: { name: string; bytes: Buffer }[];
  egress: { proxySocket: string; caPem: string } | null;
  tenant: string | null;
}

export function checkCreate(req: CreateCapsuleRequest, config: RunnerConfig): CreatePlan {
  if (typeof req !== 'object' || req === null) throw new RunnerError('invalid', 'params: must be an object');
  const id = validateCapsuleId(req.capsule_id);
  const { bounds } = config;
  const mem = req.memory_mb;
  if (!Number.isInteger(mem) || mem < bounds.minMemoryMb || mem > bounds.maxMemoryMb)
    throw new RunnerError('invalid', `memory_mb: must be an integer in ${bounds.minMemoryMb}..${bounds.maxMemoryMb}`);
  const runtime = req.runtime ?? 'default';
  const imageRoot = typeof runtime === 'string' ? config.runtimes[runtime] : undefined;
  if (!imageRoot) throw new RunnerError('invalid', `runtime: unknown runtime ${JSON.stringify(runtime)}`);
  const env = validateEnv(req.env, 'env');
  const storageMb = storageMbFor(mem, bounds.tmpfsMb);
  const apps: { name: string; bytes: Buffer }[] = [];
  try {
    if (req.app_files !== undefined) {
      if (!Array.isArray(req.app_files) || req.app_files.length > 256)
        throw new RunnerError('invalid', 'app_files: must be a list of at most 256 files');
      let total = 0;
      const seen = new Set<string>();
      req.app_files.forEach((f, i) => {
        const name = validateFilename(f?.filename, `app_files[${i}].filename`);
        if (seen.has(name)) throw new RunnerError('invalid', `app_files[${i}].filename: duplicate ${name}`);
        seen.add(name);
        const bytes = decodeB64(f.content_b64, `app_files[${i}].content_b64`, bounds.maxUploadBytes);
        total += bytes.length;
        apps.push({ name, bytes });
      });
      if (total > storageMb * 1024 * 1024)
        throw new RunnerError('too_large', 'app_files: larger than the capsule storage');
    }
    const egress = req.egress !== undefined && req.egress !== null ? validateEgress(req.egress) : null;
    const tenant = req.tenant ?? null;
    if (tenant !== null && !/^[A-Za-z0-9_-]{1,64}$/.test(tenant))
      throw new RunnerError('invalid', 'tenant: 1-64 of A-Z a-z 0-9 _ -');
    return { id, memoryMb: mem, storageMb, imageRoot, env, apps, egress, tenant };
  } catch (e) {
    for (const a of apps) a.bytes.fill(0); // refused: the decoded customer bytes never outlive the call
    throw e;
  }
}

/** An exec request, checked and decoded; `input.bytes` holds customer bytes the caller zeroes. */
export interface ExecPlan {
  env: Record<string, string>;
  cwd: string;
  input: { dir: string; name: string; bytes: Buffer } | null;
}

export function checkExec(
  req: ExecRequest,
  capsule: { tmpfsDir: string; hasApp: boolean },
  bounds: RunnerConfig['bounds'],
): ExecPlan {
  if (typeof req.command !== 'string' || req.command.length === 0)
    throw new RunnerError('invalid', 'command: must be a non-empty string');
  if (Buffer.byteLength(req.command) > bounds.maxCommandBytes)
    throw new RunnerError('too_large', `command: longer than ${bounds.maxCommandBytes} bytes`);
  if (req.command.includes('\0')) throw new RunnerError('invalid', 'command: must not contain NUL');
  if (!Number.isInteger(req.timeout_ms) || req.timeout_ms < 1 || req.timeout_ms > bounds.maxTimeoutMs)
    throw new RunnerError('invalid', `timeout_ms: must be an integer in 1..${bounds.maxTimeoutMs}`);
  const env = validateEnv(req.env, 'env');
  const cwd = req.cwd ?? '/data';
  if (cwd !== '/data' && !(cwd === '/capsule/app' && capsule.hasApp))
    throw new RunnerError('invalid', 'cwd: must be /data, or /capsule/app on a capsule with app files');
  if (req.input_b64 === undefined || req.input_b64 === null) {
    if (req.input_filename !== undefined) throw new RunnerError('invalid', 'input_filename: given without input_b64');
    return { env, cwd, input: null };
  }
  const path = req.input_filename ?? '/data/input/data';
  if (typeof path !== 'string') throw new RunnerError('invalid', 'input_filename: must be a string');
  const prefix = Object.keys(INPUT_DIRS).find((p) => path.startsWith(p));
  if (!prefix)
    throw new RunnerError('invalid', 'input_filename: must be /data/input/<name>, /data/output/<name> or /tmp/<name>');
  const name = validateFilename(path.slice(prefix.length), 'input_filename');
  // Decoded last: from here on the caller zeroes the bytes however the exec ends.
  const bytes = decodeB64(req.input_b64, 'input_b64', bounds.maxInputBytes);
  return { env, cwd, input: { dir: join(capsule.tmpfsDir, INPUT_DIRS[prefix]!), name, bytes } };
}
