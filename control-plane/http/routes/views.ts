// Wire views of domain records (SPEC field lists).
import type { Capsule } from '../../domain/index.js';
import { DEFINITION_FIELDS, type Capsulefile, type CapsulefileFileEntry } from '../../capsulefile/index.js';
import type { CapsuleUsage, ExecResult, FileEntry, ListedFile } from '../../../shared/runner-protocol.js';

export function capsuleCreated(c: Capsule): Record<string, unknown> {
  return {
    id: c.id,
    status: c.status,
    ttl_seconds: c.ttl_seconds,
    created_at: c.created_at,
    expires_at: c.expires_at,
    capsulefile_id: c.capsulefile_id,
    data_classification: c.data_classification,
    metadata: c.metadata,
  };
}

export function capsuleStatus(c: Capsule): Record<string, unknown> {
  return {
    id: c.id,
    status: c.status,
    ttl_seconds: c.ttl_seconds,
    created_at: c.created_at,
    expires_at: c.expires_at,
    execution_count: c.execution_count,
    bytes_processed: c.bytes_processed,
    metadata: c.metadata,
    data_classification: c.data_classification,
    capsulefile_id: c.capsulefile_id,
    ...(c.destroyed_at ? { destroyed_at: c.destroyed_at } : {}),
  };
}

/**
 * A live capsule's storage: its tmpfs, sized from memory_mb (three quarters
 * of it, at most the operator's tmpfs bound); its files count against its
 * memory limit too (docs/SECURITY.md, layer 5).
 */
export function storageView(u: CapsuleUsage): Record<string, unknown> {
  return {
    used_bytes: u.storage_used_bytes,
    limit_bytes: u.storage_limit_bytes,
    memory_used_bytes: u.memory_used_bytes,
    memory_limit_bytes: u.memory_limit_bytes,
  };
}

export function execView(capsuleId: string, r: ExecResult): Record<string, unknown> {
  return {
    capsule_id: capsuleId,
    stdout: r.stdout,
    stderr: r.stderr,
    exit_code: r.exit_code,
    duration_ms: r.duration_ms,
    executed_at: r.executed_at,
    timed_out: r.timed_out,
    oom_killed: r.oom_killed,
    process_limit_killed: r.process_limit_killed === true,
    stdout_truncated: r.stdout_truncated,
    stderr_truncated: r.stderr_truncated,
  };
}

export const fileView = (f: FileEntry | ListedFile): Record<string, unknown> => ({
  filename: f.filename,
  size_bytes: f.size_bytes,
  sha512: f.sha512,
});

const TYPES: Record<string, string> = {
  json: 'application/json',
  jsonl: 'application/x-ndjson',
  csv: 'text/csv',
  txt: 'text/plain',
  md: 'text/markdown',
  html: 'text/html',
  xml: 'application/xml',
  pdf: 'application/pdf',
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gz: 'application/gzip',
  zip: 'application/zip',
  parquet: 'application/vnd.apache.parquet',
};
/**
 * `Content-Disposition: attachment` (RFC 6266) for a customer file: a
 * downloaded file is never rendered from the API origin. `filename` is an
 * ASCII stand-in, `filename*` the exact name (RFC 8187 UTF-8 percent-encoding).
 */
export function attachment(filename: string): string {
  const ascii = filename.replace(/[^A-Za-z0-9._ -]/g, '_');
  const exact = encodeURIComponent(filename).replace(
    /[*'()]/g,
    (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`,
  );
  return `attachment; filename="${ascii}"; filename*=UTF-8''${exact}`;
}

/** Content-Type from the file extension (SPEC: output download). */
export function contentTypeFor(filename: string): string {
  const ext = /\.([A-Za-z0-9]+)$/.exec(filename)?.[1]?.toLowerCase() ?? '';
  return TYPES[ext] ?? 'application/octet-stream';
}

/** List item (SPEC: id, name, status, is_system, content_hash). */
export function capsulefileItem(c: Capsulefile): Record<string, unknown> {
  return { id: c.id, name: c.definition.name, status: c.status, is_system: c.is_system, content_hash: c.content_hash };
}

/** Detail read: every definition field (null when not declared), the files and the finalize facts. */
export function capsulefileDetail(c: Capsulefile, files: readonly CapsulefileFileEntry[]): Record<string, unknown> {
  const fields: Record<string, unknown> = {};
  for (const f of DEFINITION_FIELDS) fields[f] = c.definition[f] ?? null;
  return {
    id: c.id,
    status: c.status,
    is_system: c.is_system,
    ...fields,
    files: files.map((f) => ({ filename: f.filename, size_bytes: f.size_bytes, sha512: f.sha512 })),
    content_hash: c.content_hash,
    size_bytes: c.size_bytes,
    file_count: c.file_count,
    finalized_at: c.finalized_at,
    created_at: c.created_at,
  };
}
