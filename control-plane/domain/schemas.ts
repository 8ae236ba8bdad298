// Request schemas (zod) and the one translation of a schema failure into the
// SPEC's 400: the message names the field. Unknown fields are rejected.
import { z } from 'zod';
import { ApiError, invalid } from '../../shared/errors.js';
import { DATA_CLASSIFICATIONS, JURISDICTIONS } from './types.js';

/** SPEC "Limits". Sizes are UTF-8 bytes. */
export const COMMAND_MAX_BYTES = 10 * 1024;
export const INPUT_DATA_MAX_BYTES = 512 * 1024;
export const METADATA_MAX_BYTES = 4 * 1024;
export const METADATA_MAX_KEYS = 16;
export const METADATA_KEY_MAX_CHARS = 64;
export const METADATA_VALUE_MAX_CHARS = 256;
export const RESERVED_METADATA_PREFIX = 'svc:';

/** One plain file name under the capsule's writable tmpfs mounts; no control characters. */
// eslint-disable-next-line no-control-regex
const INPUT_PATH_RE = /^\/(data\/input|data\/output|tmp)\/[^/\u0000-\u001f\u007f]+$/;

const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');
const chars = (s: string): number => [...s].length;

/** JSON text that must be one object (a request body): 400 naming `body` otherwise. */
export function parseJsonObject(text: string): Record<string, unknown> {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw invalid('body', 'malformed JSON');
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value))
    throw invalid('body', 'must be a JSON object');
  return value as Record<string, unknown>;
}

/**
 * A top-level member sent as `null` reads as absent: the service itself
 * answers `null` for optional members it has no value for (for example
 * `capsulefile_id`), so a client may send such a view back unchanged.
 */
export function nullAsAbsent(value: unknown): unknown {
  if (value === null || typeof value !== 'object' || Array.isArray(value)) return value;
  const entries = Object.entries(value);
  if (!entries.some(([, v]) => v === null)) return value;
  // fromEntries defines own properties: a "__proto__" member stays plain data.
  return Object.fromEntries(entries.filter(([, v]) => v !== null));
}

/** Converts the first zod issue into invalid_parameters naming the field; null members are absent. */
export function parseBody<T>(schema: z.ZodType<T>, raw: unknown, root = 'body'): T {
  const value = nullAsAbsent(raw);
  const r = schema.safeParse(value);
  if (r.success) return r.data;
  const issue = r.error.issues[0];
  if (!issue) throw invalid(root, 'invalid');
  if (issue.code === 'unrecognized_keys') {
    const key = issue.keys[0] ?? '?';
    const field = [...issue.path.map(String), key].join('.');
    throw invalid(field, 'unknown field');
  }
  const field = issue.path.length ? issue.path.map(String).join('.') : root;
  let at: unknown = value;
  for (const k of issue.path)
    at = at !== null && typeof at === 'object' ? (at as Record<PropertyKey, unknown>)[k as PropertyKey] : undefined;
  if (at === undefined) throw invalid(field, 'is required');
  throw invalid(field, issue.message);
}

const int = (min: number, max: number) => z.number().int().min(min).max(max);

export const signupSchema = z.strictObject({
  email: z
    .string()
    .trim()
    .max(254)
    .regex(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, 'must be an email address'),
  jurisdiction: z.enum(JURISDICTIONS),
});

export const contactSchema = z.strictObject({
  email: z
    .string()
    .trim()
    .max(254)
    .regex(/^[^\s@]+@[^\s@]+\.[^\s@]+$/, 'must be an email address'),
  name: z.string().max(200).optional(),
  company: z.string().max(200).optional(),
  message: z.string().min(1).max(5000),
  source: z.string().max(200).optional(),
});

export const createCapsuleSchema = z.strictObject({
  ttl: int(1, 365 * 24 * 3600).optional(),
  /** Self-hosted / client-library name of `ttl`; the two must agree if both are given. */
  max_lifetime_seconds: int(1, 365 * 24 * 3600).optional(),
  data_classification: z.enum(DATA_CLASSIFICATIONS).optional(),
  capsulefile_id: z.string().min(1).max(128).optional(),
  egress_profile_id: z.string().min(1).max(128).optional(),
  // Passed through unchanged (z.record would rebuild it and drop a "__proto__" key); checked by validateMetadata.
  metadata: z
    .custom<Record<string, unknown>>(
      (v) => v !== null && typeof v === 'object' && !Array.isArray(v),
      'must be an object of string values',
    )
    .optional(),
});
export type CreateCapsuleBody = z.infer<typeof createCapsuleSchema>;

export const createSessionSchema = z.strictObject({
  data_classification: z.enum(DATA_CLASSIFICATIONS).optional(),
  ttl: int(1, 365 * 24 * 3600).optional(),
});

export const execSchema = z.strictObject({
  /** Optional for a capsule pinned to a Capsulefile: its entrypoint runs. */
  command: z.string().min(1).optional(),
  input_data: z.string().optional(),
  // Checked here too (the runner is the authority) so a refused exec leaves no ExecutionStarted behind.
  input_filename: z
    .string()
    .regex(INPUT_PATH_RE, 'must be /data/input/<name>, /data/output/<name> or /tmp/<name>')
    .refine(
      (p) => !/\/\.{1,2}$/.test(p) && Buffer.byteLength(p.slice(p.lastIndexOf('/') + 1)) <= 255,
      'must name a plain file',
    )
    .optional(),
  timeout: int(1, 365 * 24 * 3600).optional(),
});
export type ExecBody = z.infer<typeof execSchema>;

export const sessionExecSchema = z.strictObject({
  command: z.string().min(1),
  input_data: z.string().optional(),
  timeout: int(1, 365 * 24 * 3600).optional(),
});

export const verifySchema = z.strictObject({ cdp: z.unknown() });

/** Size limits that answer 413 rather than 400 (SPEC: 413 for command / input_data). */
export function checkExecSizes(body: { command: string; input_data?: string | undefined }): void {
  if (utf8Bytes(body.command) > COMMAND_MAX_BYTES) {
    throw new ApiError('payload_too_large', `command: exceeds ${COMMAND_MAX_BYTES} bytes`, {
      extra: { field: 'command' },
    });
  }
  if (body.input_data !== undefined && utf8Bytes(body.input_data) > INPUT_DATA_MAX_BYTES) {
    throw new ApiError(
      'payload_too_large',
      `input_data: exceeds ${INPUT_DATA_MAX_BYTES} bytes; use the upload endpoint`,
      { extra: { field: 'input_data' } },
    );
  }
}

/** SPEC "Limits": capsule metadata. Errors name `metadata.<key>`. */
export function validateMetadata(raw: Record<string, unknown> | undefined): Record<string, string> {
  if (raw === undefined) return {};
  const keys = Object.keys(raw);
  if (keys.length > METADATA_MAX_KEYS) throw invalid('metadata', `at most ${METADATA_MAX_KEYS} keys`);
  const entries: [string, string][] = [];
  for (const k of keys) {
    const v = raw[k];
    if (k.length === 0) throw invalid('metadata', 'keys must not be empty');
    if (chars(k) > METADATA_KEY_MAX_CHARS)
      throw invalid(`metadata.${k.slice(0, 64)}`, `key longer than ${METADATA_KEY_MAX_CHARS} characters`);
    if (k.toLowerCase().startsWith(RESERVED_METADATA_PREFIX))
      throw invalid(`metadata.${k}`, `the "${RESERVED_METADATA_PREFIX}" key prefix is reserved`);
    if (typeof v !== 'string') throw invalid(`metadata.${k}`, 'value must be a string');
    if (chars(v) > METADATA_VALUE_MAX_CHARS)
      throw invalid(`metadata.${k}`, `value longer than ${METADATA_VALUE_MAX_CHARS} characters`);
    entries.push([k, v]);
  }
  // fromEntries defines own properties: a key such as "__proto__" stays plain data.
  const out: Record<string, string> = Object.fromEntries(entries);
  if (utf8Bytes(JSON.stringify(out)) > METADATA_MAX_BYTES)
    throw invalid('metadata', `exceeds ${METADATA_MAX_BYTES} bytes in total`);
  return out;
}

export const createApiKeySchema = z.strictObject({
  mode: z.enum(['live', 'test']).optional(),
});

export const rotateApiKeySchema = z.strictObject({
  /** How long the old key keeps working; at most 24 h. */
  grace_seconds: int(0, 24 * 3600).optional(),
});

export const mfaCodeSchema = z.strictObject({
  /** A 6-digit TOTP code, or (verify only) a recovery code. */
  code: z.string().min(1).max(64),
});

export const checkoutSchema = z.strictObject({
  tier: z.string().min(1).max(64),
});

/** A POST that takes no fields (an empty body or `{}`). */
export const emptyBodySchema = z.strictObject({});
