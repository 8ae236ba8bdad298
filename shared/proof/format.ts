// Stage 0 of verification: parse and version. Reads every member the later
// stages use exactly once, checks presence, type and hash format, and
// canonicalizes the view and activity events, so that no later stage touches
// the caller's object again. Checks run member by member in a fixed order; the
// first problem found is the verdict.
import type { DestructionReport, FailureReason } from './types.js';
import { readDestruction } from './destruction.js';
import { STEP_COUNT } from './chain.js';
import { canonicalViewJcs } from './canonical.js';
import { quoteString, serialize } from './jcs.js';

export const SUPPORTED_VERSIONS = ['1.0', '2.0', '2.1'] as const;
export type CdpVersion = (typeof SUPPORTED_VERSIONS)[number];

const SHA256_RE = /^sha256:[0-9a-f]{64}$/;

export interface ParsedStep {
  step: number;
  subsystem: string;
  /** As serialized, with its prefix. */
  chainHash: string;
}

export interface ParsedAttestation {
  algorithm: string;
  publicKey: string;
  signature: string;
}

export interface ParsedProof {
  version: CdpVersion;
  /** `legacy`: the session-named 1.0 form whose chain is taken as is. */
  form: 'capsule' | 'legacy';
  partial: boolean;
  destroyedAt: string | undefined;
  steps: ParsedStep[];
  finalHash: string | undefined;
  attestation: ParsedAttestation | undefined;
  canonicalHash: string | undefined;
  /** JCS of the canonical view (2.x only). */
  viewJcs: string | undefined;
  /** JCS of each activity event, when the document carries `activity` (2.x only). */
  activityJcs: string[] | undefined;
  activityRoot: string | undefined;
  signingAuthorityId: string | undefined;
  signingKeyVersion: number | undefined;
  /** The signed destruction statement inside `termination` (absent in older documents). */
  destruction: DestructionReport | undefined;
  /** Keys of `component_proofs` when it is an object (2.x capsule form). */
  componentKeys: ReadonlySet<string> | undefined;
}

export type Stage0 = { ok: true; proof: ParsedProof } | { ok: false; failure: FailureReason };

class FormatFailure {
  constructor(readonly failure: FailureReason) {}
}

const fail = (type: FailureReason['type'], reason: string): never => {
  throw new FormatFailure({ type, reason });
};

export function isPlainObject(v: unknown): v is Record<string, unknown> {
  if (v === null || typeof v !== 'object' || Array.isArray(v)) return false;
  const proto = Object.getPrototypeOf(v);
  return proto === Object.prototype || proto === null;
}

type Obj = Record<string, unknown>;

function str(o: Obj, k: string, required: boolean): string | undefined {
  const v = o[k];
  if (v === undefined) return required ? fail('FormatInvalid', 'MissingField') : undefined;
  return typeof v === 'string' ? v : fail('FormatInvalid', 'WrongType');
}

function hash(o: Obj, k: string, required: boolean, re: (s: string) => boolean): string | undefined {
  const v = str(o, k, required);
  if (v !== undefined && !re(v)) fail('FormatInvalid', 'BadHashFormat');
  return v;
}

/**
 * `sha512:` + 128 lower-case hex. The length is checked first, so an
 * unbounded `+` suffices; V8 runs this about twice as fast as a character
 * loop or a counted `{128}` (measured on the vectors' hashes).
 */
const SHA512_RE = /^sha512:[0-9a-f]+$/;
const isSha512 = (s: string): boolean => s.length === 135 && SHA512_RE.test(s);
const isLegacyHash = (s: string) => SHA256_RE.test(s) || isSha512(s);

interface Steps {
  steps: ParsedStep[];
  chainJcs: string | undefined;
}

function parseSteps(doc: Obj, legacy: boolean): Steps {
  const chain = doc['chain'];
  if (chain === undefined) fail('FormatInvalid', 'MissingField');
  if (!Array.isArray(chain)) return fail('FormatInvalid', 'WrongType');
  const steps: ParsedStep[] = [];
  // JCS of the whole chain while every step has the emitter's shape; see stepJcs.
  let chainJcs: string | undefined = legacy ? undefined : '[';
  for (let i = 0; i < chain.length; i++) {
    const s: unknown = chain[i];
    if (!isPlainObject(s)) return fail('FormatInvalid', 'WrongType');
    const step = s['step'];
    if (step === undefined) fail('FormatInvalid', 'MissingField');
    if (typeof step !== 'number' || !Number.isInteger(step)) return fail('FormatInvalid', 'WrongType');
    const subsystem = str(s, 'subsystem', true)!;
    const operation = str(s, 'operation', !legacy);
    const evidenceHash = legacy ? undefined : hash(s, 'evidence_hash', true, isSha512);
    const chainHash = hash(s, 'chain_hash', true, legacy ? isLegacyHash : isSha512)!;
    steps.push({ step, subsystem, chainHash });
    if (chainJcs !== undefined) {
      const j = stepJcs(s, step, subsystem, operation!, evidenceHash!, chainHash);
      chainJcs = j === undefined ? undefined : chainJcs + (i > 0 ? ',' : '') + j;
    }
  }
  return { steps, chainJcs: chainJcs === undefined ? undefined : chainJcs + ']' };
}

/**
 * RFC 8785 JCS of a chain step whose own members are exactly, in this order,
 * step, subsystem, operation, evidence_hash, chain_hash (as the emitter
 * writes them), from the values just checked: an integer, two strings and two
 * `sha512:` hex hashes, which need no escaping. undefined for any other
 * shape, which the generic serializer then handles (same result, slower).
 */
function stepJcs(
  s: Obj,
  step: number,
  subsystem: string,
  operation: string,
  evidenceHash: string,
  chainHash: string,
): string | undefined {
  const k = Object.keys(s);
  if (
    k.length !== 5 ||
    k[0] !== 'step' ||
    k[1] !== 'subsystem' ||
    k[2] !== 'operation' ||
    k[3] !== 'evidence_hash' ||
    k[4] !== 'chain_hash'
  )
    return undefined;
  return (
    '{"chain_hash":"' +
    chainHash +
    '","evidence_hash":"' +
    evidenceHash +
    '","operation":' +
    quoteString(operation) +
    ',"step":' +
    String(step) +
    ',"subsystem":' +
    quoteString(subsystem) +
    '}'
  );
}

function parseAttestation(doc: Obj): ParsedAttestation | undefined {
  const att = doc['attestation'];
  if (att === undefined) return undefined;
  if (!isPlainObject(att)) return fail('FormatInvalid', 'WrongType');
  const algorithm = str(att, 'algorithm', true)!;
  const publicKey = str(att, 'public_key', true)!;
  str(att, 'key_id', false);
  const signature = str(att, 'signature', true)!;
  return { algorithm, publicKey, signature };
}

function parseLegacy(doc: Obj): ParsedProof {
  str(doc, 'session_id', true);
  const destroyedAt = str(doc, 'destroyed_at', false);
  const { steps } = parseSteps(doc, true);
  const finalHash = hash(doc, 'final_hash', true, isLegacyHash);
  const attestation = parseAttestation(doc);
  return {
    version: '1.0',
    form: 'legacy',
    partial: false,
    destroyedAt,
    steps,
    finalHash,
    attestation,
    canonicalHash: undefined,
    viewJcs: undefined,
    activityJcs: undefined,
    activityRoot: undefined,
    signingAuthorityId: undefined,
    signingKeyVersion: undefined,
    destruction: undefined,
    componentKeys: undefined,
  };
}

function parseCapsule(doc: Obj, version: CdpVersion): ParsedProof {
  const v2 = version !== '1.0';
  str(doc, 'capsule_id', true);
  str(doc, 'created_at', true);
  const completeness = str(doc, 'completeness', false);
  if (completeness !== undefined && completeness !== 'complete' && completeness !== 'partial') {
    fail('FormatInvalid', 'WrongType');
  }
  const partial = completeness === 'partial';
  str(doc, 'reason', partial);
  const { steps, chainJcs } = parseSteps(doc, false);
  // A partial proof has no destruction time or final hash unless it carries a full chain.
  const needsChain = !v2 || !partial || steps.length === STEP_COUNT;
  const destroyedAt = str(doc, 'destroyed_at', needsChain);
  const finalHash = hash(doc, 'final_hash', needsChain, isSha512);
  const activityRoot = v2 ? hash(doc, 'activity_root', false, isSha512) : undefined;
  let signingAuthorityId: string | undefined;
  let signingKeyVersion: number | undefined;
  if (v2 && (doc['signing_authority_id'] !== undefined || doc['signing_key_version'] !== undefined)) {
    signingAuthorityId = str(doc, 'signing_authority_id', true);
    const kv = doc['signing_key_version'];
    if (kv === undefined) fail('FormatInvalid', 'MissingField');
    if (typeof kv !== 'number' || !Number.isInteger(kv) || kv < 0) fail('FormatInvalid', 'WrongType');
    signingKeyVersion = kv as number;
  }
  const destruction = destructionOf(doc['termination']);
  const attestation = parseAttestation(doc);
  // 2.x: the signature basis; needed whenever there is a signature to check.
  const canonicalHash = v2 ? hash(doc, 'canonical_hash', attestation !== undefined, isSha512) : undefined;
  let activityJcs: string[] | undefined;
  let viewJcs: string | undefined;
  if (v2) {
    const activity = doc['activity'];
    if (activity !== undefined) {
      if (!Array.isArray(activity)) fail('FormatInvalid', 'WrongType');
      const events = activity as unknown[];
      activityJcs = [];
      for (let i = 0; i < events.length; i++) {
        const e = events[i];
        if (e === undefined) fail('FormatInvalid', 'WrongType');
        activityJcs.push(serialize(e, 1)); // a JcsError here is WrongType (see parseProof)
      }
    }
    viewJcs = canonicalViewJcs(doc, chainJcs);
  }
  return {
    version,
    form: 'capsule',
    partial,
    destroyedAt,
    steps,
    finalHash,
    attestation,
    canonicalHash,
    viewJcs,
    activityJcs,
    activityRoot,
    signingAuthorityId,
    signingKeyVersion,
    destruction,
    componentKeys:
      v2 && isPlainObject(doc['component_proofs']) ? new Set(Object.keys(doc['component_proofs'])) : undefined,
  };
}

function destructionOf(termination: unknown): DestructionReport | undefined {
  const d = readDestruction(termination);
  return d === 'bad' ? fail('FormatInvalid', 'WrongType') : d;
}

/** Stage 0. Never throws. */
export function parseProof(doc: unknown): Stage0 {
  try {
    if (!isPlainObject(doc)) return { ok: false, failure: { type: 'FormatInvalid', reason: 'NotAnObject' } };
    // The presentation projection has summaries in place of the per-step chain.
    if (
      doc['chain'] === undefined &&
      (doc['destruction'] !== undefined || doc['document_hash'] !== undefined || doc['verify'] !== undefined)
    ) {
      return { ok: false, failure: { type: 'FormatInvalid', reason: 'PresentationForm' } };
    }
    const version = str(doc, 'cdp_version', true)!;
    if (!(SUPPORTED_VERSIONS as readonly string[]).includes(version)) {
      return { ok: false, failure: { type: 'VersionUnsupported', reason: 'UnknownVersion' } };
    }
    const v = version as CdpVersion;
    const legacy = v === '1.0' && doc['session_id'] !== undefined && doc['capsule_id'] === undefined;
    return { ok: true, proof: legacy ? parseLegacy(doc) : parseCapsule(doc, v) };
  } catch (err) {
    if (err instanceof FormatFailure) return { ok: false, failure: err.failure };
    // A throwing getter, a revoked proxy, exhausted stack: the input is not JSON data.
    return { ok: false, failure: { type: 'FormatInvalid', reason: 'WrongType' } };
  }
}
