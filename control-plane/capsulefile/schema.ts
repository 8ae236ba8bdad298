// The Capsulefile definition (API body of POST /v1/capsulefiles) and its
// validation. Unknown fields are rejected; every error names its field.
import { z } from 'zod';
import { invalid } from '../../shared/errors.js';
import { checkEgressEntry } from './egress-entry.js';
import * as L from './limits.js';
import { packageKey, parsePackageSpec } from './packages.js';

export const DATA_CLASSIFICATIONS = ['general', 'PHI', 'PII', 'financial', 'credentials'] as const;
/** Ecosystems whose packages can be checked present in the base image (never downloaded). */
export const PACKAGE_ECOSYSTEMS = ['apt', 'pip', 'npm'] as const;

const encoder = new TextEncoder();
const utf8Bytes = (s: string): number => encoder.encode(s).length;
const noNul = (s: string): boolean => !s.includes('\0');
const uniq = (a: readonly string[]): boolean => new Set(a).size === a.length;

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;
const TOOL_NAME = /^[A-Za-z0-9_.:/-]+$/;

const egressEntry = z.string().superRefine((s, ctx) => {
  const r = checkEgressEntry(s);
  if (!r.ok) ctx.addIssue({ code: 'custom', message: r.why });
});

const toolList = z
  .array(
    z
      .string()
      .min(1)
      .max(L.MCP_TOOL_NAME_MAX_CHARS)
      .regex(TOOL_NAME, 'tool names may contain letters, digits, "_", ".", ":", "/", "-"'),
  )
  .max(L.MCP_TOOLS_MAX)
  .refine(uniq, 'must not list a tool twice');

export const mcpPolicySchema = z
  .strictObject({ allowed_tools: toolList.optional(), prohibited_tools: toolList.optional() })
  .superRefine((p, ctx) => {
    if (p.allowed_tools === undefined && p.prohibited_tools === undefined) {
      ctx.addIssue({
        code: 'custom',
        message: 'must declare allowed_tools, prohibited_tools or both (omit mcp_policy for no tool policy)',
      });
    }
    const allowed = new Set(p.allowed_tools ?? []);
    const both = (p.prohibited_tools ?? []).find((t) => allowed.has(t));
    if (both !== undefined)
      ctx.addIssue({ code: 'custom', path: ['prohibited_tools'], message: `"${both}" is both allowed and prohibited` });
  });

const hostname = z.string().refine((s) => {
  const r = checkEgressEntry(s);
  return r.ok && r.kind === 'domain';
}, 'must be a lower-case hostname');

/** API-only; shape-validated and hashed, NOT enforced (SPEC item 10). */
export const tlsPinnedCertsSchema = z
  .array(
    z.strictObject({
      host: hostname,
      cert_sha256: z
        .string()
        .regex(/^[0-9a-f]{64}$/, 'must be 64 lower-case hex digits (SHA-256 of the DER certificate)'),
    }),
  )
  .max(L.TLS_PINS_MAX);

/** Shape only: the customer-hosted signing service is not called by this build. */
/** PEM armour of `label` around standard base64 (the key or certificate itself is parsed where it is used). */
const pem = (label: string, max: number) =>
  z
    .string()
    .max(max)
    .regex(
      new RegExp(`^(?:-----BEGIN ${label}-----\\r?\\n[A-Za-z0-9+/=\\r\\n]+-----END ${label}-----\\r?\\n?)+$`),
      `must be a PEM block of type ${label}`,
    );

export const signingConfigSchema = z.strictObject({
  endpoint: z
    .string()
    .max(L.SIGNING_ENDPOINT_MAX_CHARS)
    .refine((s) => {
      try {
        const u = new URL(s);
        return u.protocol === 'https:' && u.username === '' && u.password === '' && u.hash === '';
      } catch {
        return false;
      }
    }, 'must be an https:// URL without credentials or fragment'),
  algorithm: z.enum(['Ed25519', 'RSA-PSS-SHA256']),
  public_key: pem('PUBLIC KEY', L.SIGNING_PEM_MAX_CHARS),
  ca_cert: pem('CERTIFICATE', L.SIGNING_PEM_MAX_CHARS).optional(),
});

const envVars = z
  .record(
    z
      .string()
      .max(L.ENV_NAME_MAX_CHARS)
      .regex(ENV_NAME, 'environment variable names are letters, digits and "_", not starting with a digit'),
    z
      .string()
      .refine((s) => utf8Bytes(s) <= L.ENV_VALUE_MAX_BYTES, `value must be at most ${L.ENV_VALUE_MAX_BYTES} bytes`)
      .refine(noNul, 'value must not contain NUL'),
  )
  .superRefine((env, ctx) => {
    const keys = Object.keys(env);
    if (keys.length > L.ENV_VARS_MAX) ctx.addIssue({ code: 'custom', message: `at most ${L.ENV_VARS_MAX} variables` });
    const total = keys.reduce((n, k) => n + utf8Bytes(k) + utf8Bytes(env[k] ?? ''), 0);
    if (total > L.ENV_TOTAL_MAX_BYTES)
      ctx.addIssue({ code: 'custom', message: `names and values must total at most ${L.ENV_TOTAL_MAX_BYTES} bytes` });
  });

/** Each entry a package of its ecosystem, optionally version-pinned in that ecosystem's syntax (packages.ts). */
const packages = z
  .partialRecord(
    z.enum(PACKAGE_ECOSYSTEMS),
    z
      .array(z.string().min(1).max(256))
      .min(1)
      .max(L.PACKAGES_PER_ECOSYSTEM_MAX)
      .refine(uniq, 'must not list a package twice'),
  )
  .superRefine((p, ctx) => {
    for (const eco of PACKAGE_ECOSYSTEMS) {
      const seen = new Set<string>();
      (p[eco] ?? []).forEach((entry, i) => {
        const spec = parsePackageSpec(eco, entry);
        if ('problem' in spec) return ctx.addIssue({ code: 'custom', path: [eco, i], message: spec.problem });
        const key = packageKey(eco, spec.name);
        if (seen.has(key)) ctx.addIssue({ code: 'custom', path: [eco, i], message: 'must not list a package twice' });
        seen.add(key);
      });
    }
  });

/** Fields shared by the API body and Capsulefile.yaml. */
const baseFields = {
  name: z
    .string()
    .min(1)
    .max(L.NAME_MAX_CHARS)
    .regex(
      /^[A-Za-z0-9][A-Za-z0-9._-]*$/,
      'may contain letters, digits, ".", "_", "-", starting with a letter or digit',
    ),
  runtime: z
    .string()
    .min(1)
    .max(L.RUNTIME_MAX_CHARS)
    .regex(/^[A-Za-z0-9][A-Za-z0-9._+-]*$/, 'may contain letters, digits, ".", "_", "+", "-"'),
  entrypoint: z
    .string()
    .min(1)
    .refine((s) => utf8Bytes(s) <= L.ENTRYPOINT_MAX_BYTES, `must be at most ${L.ENTRYPOINT_MAX_BYTES} bytes`)
    .refine(noNul, 'must not contain NUL')
    .refine((s) => s.trim() !== '', 'must not be blank'),
  data_classification: z.enum(DATA_CLASSIFICATIONS).optional(),
  egress_declaration: z
    .array(egressEntry)
    .max(L.EGRESS_ENTRIES_MAX)
    .refine(uniq, 'must not list an entry twice')
    .optional(),
  default_ttl: z.number().int().min(L.DEFAULT_TTL_MIN_SECONDS).max(L.DEFAULT_TTL_MAX_SECONDS).optional(),
  memory_mb: z.number().int().min(L.MEMORY_MB_MIN).max(L.MEMORY_MB_MAX).optional(),
  env_vars: envVars.optional(),
  packages: packages.optional(),
  mcp_policy: mcpPolicySchema.optional(),
  signing_config: signingConfigSchema.optional(),
};

/** The API-only fields (never in Capsulefile.yaml). */
export const API_ONLY_FIELDS = ['tls_pinned_certs', 'tls_ocsp_check'] as const;

export const capsulefileDefinitionSchema = z.strictObject({
  ...baseFields,
  tls_pinned_certs: tlsPinnedCertsSchema.optional(),
  tls_ocsp_check: z.boolean().optional(),
});
export type CapsulefileDefinition = z.infer<typeof capsulefileDefinitionSchema>;

/** The fields Capsulefile.yaml may carry besides `files`. */
export const yamlDefinitionSchema = z.strictObject(baseFields);

/** Every field of a definition, in the order documented (also the content hash's field set). */
export const DEFINITION_FIELDS = [
  'name',
  'runtime',
  'entrypoint',
  'data_classification',
  'egress_declaration',
  'default_ttl',
  'memory_mb',
  'env_vars',
  'packages',
  'mcp_policy',
  'tls_pinned_certs',
  'tls_ocsp_check',
  'signing_config',
] as const satisfies readonly (keyof CapsulefileDefinition)[];

export type SchemaProblem = { path: (string | number)[]; why: string };

/** The value at `path` inside `input`, or undefined when any step is missing. */
function valueAt(input: unknown, path: readonly (string | number)[]): unknown {
  let v: unknown = input;
  for (const p of path) {
    if (v === null || typeof v !== 'object' || !Object.hasOwn(v, p)) return undefined;
    v = (v as Record<string | number, unknown>)[p];
  }
  return v;
}

/** The first zod issue of parsing `input` as a field path and a reason (unknown keys name the key). */
export function firstProblem(error: z.ZodError, input: unknown): SchemaProblem {
  const issue = error.issues[0];
  if (!issue) return { path: [], why: 'invalid' };
  const path = issue.path.filter((p): p is string | number => typeof p !== 'symbol');
  if (issue.code === 'unrecognized_keys') {
    const key = issue.keys[0] ?? '?';
    if (path.length === 1 && path[0] === 'packages')
      return { path: [...path, key], why: `unknown package ecosystem; use ${PACKAGE_ECOSYSTEMS.join(', ')}` };
    return { path: [...path, key], why: 'unknown field' };
  }
  if (issue.code === 'invalid_type' && valueAt(input, path) === undefined) return { path, why: 'is required' };
  if (issue.code === 'invalid_key') return { path, why: issue.issues[0]?.message ?? 'invalid name' };
  return { path, why: issue.message };
}

export const fieldName = (path: readonly (string | number)[], root = 'body'): string =>
  path.length ? path.map(String).join('.') : root;

/** Path of the first string (value or key) holding a lone surrogate, which UTF-8 and I-JSON cannot carry; null if none. */
export function loneSurrogatePath(value: unknown, path: (string | number)[] = []): (string | number)[] | null {
  if (typeof value === 'string') return /\p{Cs}/u.test(value) ? path : null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const p = loneSurrogatePath(value[i], [...path, i]);
      if (p) return p;
    }
  } else if (value !== null && typeof value === 'object') {
    for (const [k, v] of Object.entries(value)) {
      if (/\p{Cs}/u.test(k)) return [...path, k];
      const p = loneSurrogatePath(v, [...path, k]);
      if (p) return p;
    }
  }
  return null;
}

export const NOT_WELL_FORMED = 'must be well-formed Unicode (no lone surrogates)';

/** Validates an API body; throws invalid_parameters naming the field. */
export function parseDefinition(value: unknown): CapsulefileDefinition {
  const r = capsulefileDefinitionSchema.safeParse(value);
  if (!r.success) {
    const p = firstProblem(r.error, value);
    throw invalid(fieldName(p.path), p.why);
  }
  const bad = loneSurrogatePath(r.data);
  if (bad) throw invalid(fieldName(bad), NOT_WELL_FORMED);
  return r.data;
}

const REQUIRED_FIELDS: readonly string[] = ['name', 'runtime', 'entrypoint'];

/**
 * PATCH of a draft (JSON merge-patch style): a present field replaces the
 * current value, `null` removes an optional field; the result is validated in full.
 */
export function mergePatch(current: CapsulefileDefinition, patch: unknown): CapsulefileDefinition {
  if (patch === null || typeof patch !== 'object' || Array.isArray(patch))
    throw invalid('body', 'must be a JSON object');
  const merged: Record<string, unknown> = { ...current };
  for (const [k, v] of Object.entries(patch as Record<string, unknown>)) {
    if (!(DEFINITION_FIELDS as readonly string[]).includes(k)) throw invalid(k, 'unknown field');
    if (v === null) {
      if (REQUIRED_FIELDS.includes(k)) throw invalid(k, 'is required and cannot be removed');
      delete merged[k];
    } else {
      merged[k] = v;
    }
  }
  return parseDefinition(merged);
}
