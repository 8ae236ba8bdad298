// Response shapes of the HTTP API as zod schemas: the OpenAPI document is
// generated from them (openapi.ts) and tests validate live responses against
// them. Objects are loose (a client must accept members added later), but
// every member listed here is required unless marked optional.
import { z } from 'zod';
import { EGRESS_RULE_KINDS } from '../../shared/egress-rules.js';
import { ERROR_CODES } from '../../shared/errors.js';
import { CAPSULE_STATUSES, DATA_CLASSIFICATIONS, JURISDICTIONS } from '../domain/index.js';

const ts = z.string().describe('RFC 3339 UTC timestamp');
const sha512 = z.string().regex(/^sha512:[0-9a-f]{128}$/);
const obj = <T extends z.ZodRawShape>(shape: T) => z.looseObject(shape);
const page = (item: z.ZodType) => obj({ items: z.array(item), next_cursor: z.string().nullable() });
const anyObject = z.looseObject({});

export const ErrorEnvelope = obj({
  error: obj({
    type: z.string(),
    code: z.enum(ERROR_CODES),
    message: z.string(),
    doc_url: z.string(),
    request_id: z.string(),
    retry_after: z.number().int().optional(),
    reason: z.string().optional(),
    field: z.string().optional(),
    line: z.number().int().optional(),
    limit: z.string().optional(),
    degradation_mode: z.string().optional(),
    input_hash: z.string().optional(),
    secret_id: z.string().optional(),
  }),
});

const metadata = z.record(z.string(), z.string());

export const CapsuleCreated = obj({
  id: z.string(),
  status: z.enum(CAPSULE_STATUSES),
  ttl_seconds: z.number().int(),
  created_at: ts,
  expires_at: ts,
  capsulefile_id: z.string().nullable(),
  data_classification: z.enum(DATA_CLASSIFICATIONS),
  metadata,
});

export const Capsule = obj({
  id: z.string(),
  status: z.enum(CAPSULE_STATUSES),
  ttl_seconds: z.number().int(),
  created_at: ts,
  expires_at: ts,
  execution_count: z.number().int(),
  bytes_processed: z.number().int(),
  metadata,
  data_classification: z.enum(DATA_CLASSIFICATIONS),
  capsulefile_id: z.string().nullable(),
  destroyed_at: ts.optional(),
});

export const ExecResult = obj({
  capsule_id: z.string(),
  stdout: z.string(),
  stderr: z.string(),
  exit_code: z.number().int().nullable(),
  duration_ms: z.number(),
  executed_at: ts,
  timed_out: z.boolean(),
  oom_killed: z.boolean(),
  process_limit_killed: z.boolean(),
  stdout_truncated: z.boolean(),
  stderr_truncated: z.boolean(),
});

const fileEntry = obj({ filename: z.string(), size_bytes: z.number().int(), sha512 });
export const UploadResult = obj({ capsule_id: z.string(), filename: z.string(), size_bytes: z.number().int(), sha512 });
export const OutputList = obj({ capsule_id: z.string(), files: z.array(fileEntry) });

/** An AuditRecord, AuditProof or legacy session proof: checked by the proof verifier, not here. */
export const ProofDocument = anyObject.describe('AuditRecord / AuditProof document (cdp_version 1.0, 2.0, 2.1)');

export const DestroyResult = obj({
  capsule_id: z.string(),
  status: z.enum(CAPSULE_STATUSES),
  destroyed_at: ts,
  total_executions: z.number().int(),
  total_bytes_processed: z.number().int(),
  cdp: ProofDocument,
  audit_proof: ProofDocument,
  regulatory_context: anyObject,
  capsule_context: anyObject,
});

export const ProofRecord = obj({
  proof_id: z.string(),
  capsule_id: z.string(),
  cdp: ProofDocument,
  component_proofs: z.record(z.string(), z.string()),
  verified: z.boolean(),
  created_at: ts,
});

const proofChecks = obj({
  cdp_version_valid: z.boolean(),
  chain_integrity: z.boolean(),
  final_hash_valid: z.boolean(),
  step_count: z.number().int(),
  signature_valid: z.boolean(),
  algorithm: z.string(),
  /** Present (false) only for the legacy session form: reduced scope. */
  chain_recomputed: z.boolean().optional(),
});
/** The presentation projection is verified at reduced scope: its document hash is taken as stated. */
const presentationChecks = obj({
  cdp_version_valid: z.boolean(),
  final_hash_valid: z.boolean(),
  step_count: z.number().int(),
  signature_valid: z.boolean(),
  algorithm: z.string(),
  document_hash_recomputed: z.literal(false),
});
export const VerifyResult = obj({
  valid: z.boolean(),
  stage_reached: z.number().int().optional(),
  failure_reason: obj({ type: z.string(), reason: z.string() }).optional(),
  scope: z.literal('reduced').optional(),
  checks: z.union([proofChecks, presentationChecks]).optional(),
  completeness: z.string().optional(),
  verified_at: ts,
});

export const KeyRecord = obj({
  key_id: z.string(),
  algorithm: z.literal('Ed25519'),
  public_key: z.string(),
  created_at: ts,
  signing_authority_id: z.string(),
  signing_key_version: z.number().int(),
});

export const TrustManifest = obj({
  authorities: z.array(
    obj({
      signing_authority_id: z.string(),
      keys: z.array(obj({ signing_key_version: z.number().int().min(1), public_key: z.string() })),
    }),
  ),
});

const limits = anyObject.describe('tier limits');
export const Signup = obj({
  api_key: z.string(),
  customer_id: z.string(),
  email: z.string(),
  tier: z.string(),
  jurisdiction: z.enum(JURISDICTIONS),
  limits,
  warning: z.string(),
});
export const Customer = obj({
  customer_id: z.string(),
  email: z.string(),
  tier: z.string(),
  jurisdiction: z.enum(JURISDICTIONS),
  limits,
  usage: anyObject,
  created_at: ts,
});
export const ContactReceived = obj({ status: z.literal('received') });
export const Health = obj({ status: z.literal('healthy'), version: z.string(), timestamp: ts });
export const Ready = obj({
  status: z.literal('ready'),
  checks: obj({ database: z.string(), migrations: z.string(), runner: z.string(), recovery: z.string() }),
  timestamp: ts,
});
export const ErrorDoc = anyObject.describe('error code documentation');
export const OpenApiDocument = anyObject.describe('this OpenAPI 3.1 document');

export const CapsulefileCreated = obj({
  id: z.string(),
  status: z.literal('draft'),
  name: z.string(),
  content_hash: z.string().nullable(),
  created_at: ts,
});
export const CapsulefileItem = obj({
  id: z.string(),
  name: z.string(),
  status: z.string(),
  is_system: z.boolean(),
  content_hash: z.string().nullable(),
});
export const Capsulefile = obj({
  id: z.string(),
  status: z.string(),
  is_system: z.boolean(),
  files: z.array(fileEntry),
  content_hash: z.string().nullable(),
  size_bytes: z.number().int().nullable(),
  file_count: z.number().int().nullable(),
  finalized_at: ts.nullable(),
  created_at: ts,
});
export const CapsulefileFile = obj({
  capsulefile_id: z.string(),
  filename: z.string(),
  size_bytes: z.number().int(),
  sha512,
});
export const CapsulefileFinalized = obj({
  id: z.string(),
  status: z.string(),
  content_hash: z.string(),
  size_bytes: z.number().int(),
  file_count: z.number().int(),
  finalized_at: ts,
});

export const SessionCreated = obj({
  session_id: z.string(),
  status: z.enum(CAPSULE_STATUSES),
  ttl_seconds: z.number().int(),
  created_at: ts,
  expires_at: ts,
});
export const Session = SessionCreated.extend({
  data_classification: z.enum(DATA_CLASSIFICATIONS),
  execution_count: z.number().int(),
  bytes_processed: z.number().int(),
  destroyed_at: ts.optional(),
});
export const SessionExecResult = obj({
  session_id: z.string(),
  output: z.string(),
  stderr: z.string(),
  exit_code: z.number().int().nullable(),
  timed_out: z.boolean(),
  duration_ms: z.number(),
});
export const SessionDestroyed = obj({
  session_id: z.string(),
  status: z.literal('destroyed'),
  destroyed_at: ts,
  cdp: ProofDocument,
  proof_url: z.string(),
});

export const EgressProfile = obj({
  id: z.string(),
  name: z.string(),
  description: z.string(),
  created_at: ts,
});
const ruleShape = { id: z.string(), kind: z.string(), value: z.string(), port: z.number().int().nullable() };
export const EgressProfileDetail = EgressProfile.extend({ rules: z.array(obj(ruleShape)) });
export const EgressRule = obj({ ...ruleShape, profile_id: z.string(), created_at: ts });

export const ApiKey = obj({
  id: z.string(),
  prefix: z.string(),
  mode: z.enum(['live', 'test']),
  created_at: ts,
  last_used_at: ts.nullable(),
  revoked_at: ts.nullable(),
});
export const ApiKeyCreated = ApiKey.extend({ key: z.string(), warning: z.string() });
export const ApiKeyRevoked = obj({ id: z.string(), revoked_at: ts });
export const MfaStatus = obj({ status: z.string(), activated_at: ts.nullable(), verified_until: ts.nullable() });
export const MfaEnrollment = obj({
  status: z.literal('pending'),
  secret: z.string(),
  otpauth_url: z.string(),
  recovery_codes: z.array(z.string()),
  warning: z.string(),
});
export const MfaActivated = obj({ status: z.literal('active'), activated_at: ts, verified_until: ts });
export const MfaVerified = obj({
  verified: z.literal(true),
  method: z.string(),
  verified_until: ts,
  recovery_codes_remaining: z.number().int(),
});

export const UsageSummary = obj({ tier: z.string(), billing_cycle_start: ts, billing_cycle_end: ts });
export const UsageEstimate = obj({ tier: z.string(), billing_cycle_start: ts, billing_cycle_end: ts, as_of: ts });
export const UsageItem = anyObject.describe('one usage item (the CSV export has the same columns)');
export const Checkout = anyObject.describe('checkout session');
export const WebhookAck = anyObject.describe('acknowledgement of a processor event');

export const CapsulePage = page(Capsule);
export const CapsulefilePage = page(CapsulefileItem);
export const EgressProfilePage = page(EgressProfile);
export const EgressRulePage = page(EgressRule);
export const ApiKeyPage = page(ApiKey);
export const UsageItemPage = page(UsageItem);

// Request bodies the services validate themselves (with the same limits); described here for the document.
export const EgressProfileRequest = z.strictObject({
  name: z.string().min(1).max(128),
  description: z.string().max(1000).optional(),
});
export const EgressProfileUpdate = EgressProfileRequest.partial();
export const EgressRuleRequest = z.strictObject({
  kind: z.enum(EGRESS_RULE_KINDS),
  value: z.string(),
  port: z.number().int().min(1).max(65535).optional(),
});

// Webhooks (docs/WEBHOOKS.md).
export const WebhookEndpoint = obj({
  id: z.string(),
  url: z.string(),
  events: z.array(z.string()),
  description: z.string(),
  active: z.boolean(),
  created_at: ts,
});
export const WebhookCreated = WebhookEndpoint.extend({ signing_secret: z.string().describe('shown once') });
export const WebhookDelivery = obj({
  id: z.string(),
  webhook_id: z.string(),
  event_id: z.string(),
  event_type: z.string(),
  attempt_number: z.number().int(),
  status: z.enum(['pending', 'succeeded', 'failed', 'dead_lettered']),
  response_status: z.number().int().nullable(),
  response_body: z.string().nullable(),
  duration_ms: z.number().int().nullable(),
  error: z.string().nullable(),
  next_attempt_at: ts.nullable(),
  attempted_at: ts.nullable(),
  created_at: ts,
  replay: z.boolean(),
});
export const WebhookEndpointPage = page(WebhookEndpoint);
export const WebhookDeliveryPage = page(WebhookDelivery);
export const WebhookRequest = z.strictObject({
  url: z.string().max(2048),
  events: z.array(z.string()).min(1),
  description: z.string().max(500).optional(),
});
export const WebhookUpdate = WebhookRequest.partial().extend({ active: z.boolean().optional() });
export const AdminDegradation = obj({ modes: z.array(obj({ mode: z.string(), since: ts })) });
export const DlqReplayRequest = z.strictObject({ delivery_ids: z.array(z.string()).min(1).max(1000).optional() });
export const DlqReplayed = obj({ replayed: z.number().int() });
