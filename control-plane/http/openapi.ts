// The one registry of HTTP operations and the OpenAPI 3.1 document generated
// from it. Request schemas are the zod schemas the routes parse with; response
// schemas are wire.ts. test/control-plane/openapi.test.ts compares the routes
// the app serves with this registry, so neither can change alone.
import { z } from 'zod';
import { capsulefileDefinitionSchema } from '../capsulefile/index.js';
import {
  checkoutSchema,
  contactSchema,
  createApiKeySchema,
  createCapsuleSchema,
  createSessionSchema,
  emptyBodySchema,
  execSchema,
  mfaCodeSchema,
  rotateApiKeySchema,
  sessionExecSchema,
  signupSchema,
  verifySchema,
} from '../domain/index.js';
import { ERROR_TABLE } from './errors.js';
import * as W from './wire.js';

export type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/** A response: a named schema, a non-JSON media type, or no body (204). */
export type ResponseSpec = keyof typeof SCHEMAS | MediaSpec | null;

/** A non-JSON answer; `json` names the schema of its JSON alternative (chosen by Accept). */
export interface MediaSpec {
  media: string;
  description: string;
  json?: keyof typeof SCHEMAS;
}

export interface Operation {
  method: Method;
  /** Koa form, `:param`. */
  path: string;
  operationId: string;
  summary: string;
  tag: string;
  /** Bearer API key required. */
  auth: boolean;
  /** Idempotency-Key honoured (replayed for 24 h). */
  idempotent?: boolean;
  /** Passes the MFA gate (403 mfa_required without a recent verification). */
  mfa?: boolean;
  body?: keyof typeof SCHEMAS | { media: string; description: string };
  query?: { name: string; required: boolean; description: string }[];
  paged?: boolean;
  responses: Record<number, ResponseSpec>;
  /** Error statuses besides the ones every operation of its kind can answer. */
  errors?: number[];
  /** Extra response headers of the success answer. */
  headers?: Record<string, string>;
}

/** Every schema the document names, request and response. */
export const SCHEMAS = {
  ...W,
  SignupRequest: signupSchema,
  ContactRequest: contactSchema,
  CreateCapsuleRequest: createCapsuleSchema,
  ExecRequest: execSchema,
  CreateSessionRequest: createSessionSchema,
  SessionExecRequest: sessionExecSchema,
  CapsulefileRequest: capsulefileDefinitionSchema,
  CapsulefilePatch: capsulefileDefinitionSchema.partial(),
  CreateApiKeyRequest: createApiKeySchema,
  RotateApiKeyRequest: rotateApiKeySchema,
  MfaCodeRequest: mfaCodeSchema,
  EmptyRequest: emptyBodySchema,
  CheckoutRequest: checkoutSchema,
  VerifyRequest: verifySchema,
} satisfies Record<string, z.ZodType>;

const paging = [
  { name: 'limit', required: false, description: 'page size, 1-100 (default 20)' },
  { name: 'cursor', required: false, description: 'next_cursor of the previous page' },
];
const filename = [{ name: 'filename', required: true, description: 'plain file name' }];
const octets = { media: 'application/octet-stream', description: 'the file bytes' };
const range = [
  { name: 'from', required: false, description: 'ISO 8601 timestamp, inclusive' },
  { name: 'to', required: false, description: 'ISO 8601 timestamp, exclusive' },
];

export const OPERATIONS: Operation[] = [
  // Public.
  {
    method: 'post',
    path: '/v1/signup',
    operationId: 'signup',
    summary: 'Create an account and its first API key',
    tag: 'accounts',
    auth: false,
    body: 'SignupRequest',
    responses: { 201: 'Signup' },
    errors: [400, 409, 429],
  },
  {
    method: 'post',
    path: '/v1/contact',
    operationId: 'contact',
    summary: 'Send a message to the operator',
    tag: 'accounts',
    auth: false,
    body: 'ContactRequest',
    responses: { 200: 'ContactReceived' },
    errors: [400, 429],
  },
  {
    method: 'post',
    path: '/v1/verify',
    operationId: 'verifyProof',
    summary: 'Verify a proof document online',
    tag: 'proofs',
    auth: false,
    body: 'VerifyRequest',
    responses: { 200: 'VerifyResult' },
    errors: [400, 413, 429],
  },
  {
    method: 'get',
    path: '/v1/capsules/:id/cdp/verify',
    operationId: 'getPublicProof',
    summary: 'The public canonical AuditProof (with activity) of a destroyed capsule',
    tag: 'proofs',
    auth: false,
    query: [{ name: 'format', required: false, description: '"presentation" for the presentation projection' }],
    responses: { 200: 'ProofDocument' },
    errors: [400, 404, 429],
  },
  {
    method: 'get',
    path: '/v1/keys/:id',
    operationId: 'getKey',
    summary: 'A signing key record',
    tag: 'proofs',
    auth: false,
    responses: { 200: 'KeyRecord' },
    errors: [404, 429],
  },
  {
    method: 'get',
    path: '/v1/trust-manifest',
    operationId: 'getTrustManifest',
    summary: "This install's signing authorities and key versions (none when it signs with ephemeral keys)",
    tag: 'proofs',
    auth: false,
    responses: { 200: 'TrustManifest' },
    errors: [429],
  },
  {
    method: 'get',
    path: '/v1/health',
    operationId: 'health',
    summary: 'Liveness',
    tag: 'service',
    auth: false,
    responses: { 200: 'Health' },
    errors: [429],
  },
  {
    method: 'get',
    path: '/metrics',
    operationId: 'metrics',
    summary: 'Prometheus metrics (text exposition format; bearer CAPSULE_METRICS_TOKEN when the operator set one)',
    tag: 'service',
    auth: false,
    responses: { 200: { media: 'text/plain', description: 'Prometheus text exposition format 0.0.4' } },
    errors: [401, 429],
  },
  {
    method: 'get',
    path: '/v1/health/ready',
    operationId: 'ready',
    summary: 'Readiness (database answers, migrations applied, a runner live, its capsules reconciled)',
    tag: 'service',
    auth: false,
    responses: { 200: 'Ready' },
    errors: [429, 503],
  },
  {
    method: 'get',
    path: '/v1/openapi.json',
    operationId: 'openapi',
    summary: 'This document',
    tag: 'service',
    auth: false,
    responses: { 200: 'OpenApiDocument' },
    errors: [429],
  },
  {
    method: 'get',
    path: '/docs/errors/:code',
    operationId: 'errorDoc',
    summary: 'Documentation of one error code (HTML, or JSON on Accept)',
    tag: 'service',
    auth: false,
    responses: { 200: { media: 'text/html', description: 'the error page', json: 'ErrorDoc' } },
    errors: [404, 429],
  },
  {
    method: 'get',
    path: '/verify',
    operationId: 'verifyPage',
    summary: 'The browser verifier page',
    tag: 'proofs',
    auth: false,
    responses: { 200: { media: 'text/html', description: 'the verifier page' } },
    errors: [429],
  },
  {
    method: 'get',
    path: '/verify/assets/*path',
    operationId: 'verifyPageAsset',
    summary: 'A static asset of the verifier page (ES module or stylesheet)',
    tag: 'proofs',
    auth: false,
    responses: { 200: { media: 'text/javascript', description: 'the asset' } },
    errors: [404, 429],
  },
  // Capsules.
  {
    method: 'post',
    path: '/v1/capsules',
    operationId: 'createCapsule',
    summary: 'Create a capsule',
    tag: 'capsules',
    auth: true,
    idempotent: true,
    body: 'CreateCapsuleRequest',
    responses: { 201: 'CapsuleCreated' },
    headers: { Location: 'the new capsule' },
    errors: [400, 402, 403, 404, 409, 503],
  },
  {
    method: 'get',
    path: '/v1/capsules',
    operationId: 'listCapsules',
    summary: 'List capsules',
    tag: 'capsules',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'CapsulePage' },
    errors: [400],
  },
  {
    method: 'get',
    path: '/v1/capsules/:id',
    operationId: 'getCapsule',
    summary: 'One capsule',
    tag: 'capsules',
    auth: true,
    responses: { 200: 'Capsule' },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/capsules/:id/exec',
    operationId: 'exec',
    summary: 'Run a command in the capsule',
    tag: 'capsules',
    auth: true,
    body: 'ExecRequest',
    responses: { 200: 'ExecResult' },
    errors: [400, 404, 409, 410, 413, 503],
  },
  {
    method: 'post',
    path: '/v1/capsules/:id/upload',
    operationId: 'upload',
    summary: 'Upload a file into /data/input',
    tag: 'capsules',
    auth: true,
    query: filename,
    body: octets,
    responses: { 200: 'UploadResult' },
    errors: [400, 404, 409, 410, 413],
  },
  {
    method: 'get',
    path: '/v1/capsules/:id/output',
    operationId: 'listOutput',
    summary: 'Files in /data/output',
    tag: 'capsules',
    auth: true,
    responses: { 200: 'OutputList' },
    errors: [404, 410],
  },
  {
    method: 'get',
    path: '/v1/capsules/:id/output/:filename',
    operationId: 'download',
    summary: 'Download one output file',
    tag: 'capsules',
    auth: true,
    responses: { 200: octets },
    headers: { 'X-Svc-File-Sha512': 'sha512:<hex> of the body' },
    errors: [404, 410],
  },
  {
    method: 'delete',
    path: '/v1/capsules/:id',
    operationId: 'destroyCapsule',
    summary: 'Destroy the capsule and emit its proof',
    tag: 'capsules',
    auth: true,
    responses: { 200: 'DestroyResult' },
    errors: [404, 409, 410, 503],
  },
  {
    method: 'get',
    path: '/v1/capsules/:id/cdp',
    operationId: 'getRecord',
    summary: 'The private AuditRecord',
    tag: 'proofs',
    auth: true,
    responses: { 200: 'ProofDocument' },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/proofs/:capsule_id',
    operationId: 'getProof',
    summary: 'The stored proof record',
    tag: 'proofs',
    auth: true,
    responses: { 200: 'ProofRecord' },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/customers/me',
    operationId: 'me',
    summary: 'The calling account',
    tag: 'accounts',
    auth: true,
    responses: { 200: 'Customer' },
  },
  // Capsulefiles.
  {
    method: 'post',
    path: '/v1/capsulefiles',
    operationId: 'createCapsulefile',
    summary: 'Create a draft Capsulefile',
    tag: 'capsulefiles',
    auth: true,
    idempotent: true,
    body: 'CapsulefileRequest',
    responses: { 201: 'CapsulefileCreated' },
    headers: { Location: 'the new Capsulefile' },
    errors: [400, 402],
  },
  {
    method: 'get',
    path: '/v1/capsulefiles',
    operationId: 'listCapsulefiles',
    summary: 'List Capsulefiles',
    tag: 'capsulefiles',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'CapsulefilePage' },
    errors: [400],
  },
  {
    method: 'get',
    path: '/v1/capsulefiles/:id',
    operationId: 'getCapsulefile',
    summary: 'One Capsulefile',
    tag: 'capsulefiles',
    auth: true,
    responses: { 200: 'Capsulefile' },
    errors: [404],
  },
  {
    method: 'patch',
    path: '/v1/capsulefiles/:id',
    operationId: 'updateCapsulefile',
    summary: 'Update a draft',
    tag: 'capsulefiles',
    auth: true,
    body: 'CapsulefilePatch',
    responses: { 200: 'Capsulefile' },
    errors: [400, 404, 409],
  },
  {
    method: 'post',
    path: '/v1/capsulefiles/:id/files',
    operationId: 'addCapsulefileFile',
    summary: 'Add a file to a draft',
    tag: 'capsulefiles',
    auth: true,
    query: filename,
    body: octets,
    responses: { 200: 'CapsulefileFile' },
    errors: [400, 404, 409, 413],
  },
  {
    method: 'post',
    path: '/v1/capsulefiles/:id/finalize',
    operationId: 'finalizeCapsulefile',
    summary: 'Finalize a draft (content hash fixed)',
    tag: 'capsulefiles',
    auth: true,
    idempotent: true,
    responses: { 200: 'CapsulefileFinalized' },
    errors: [400, 404, 409],
  },
  {
    method: 'delete',
    path: '/v1/capsulefiles/:id',
    operationId: 'deleteCapsulefile',
    summary: 'Delete a Capsulefile',
    tag: 'capsulefiles',
    auth: true,
    responses: { 204: null },
    errors: [404, 409],
  },
  // Session-named variant.
  {
    method: 'post',
    path: '/v1/sessions',
    operationId: 'createSession',
    summary: 'Create a session (older names)',
    tag: 'sessions',
    auth: true,
    body: 'CreateSessionRequest',
    responses: { 201: 'SessionCreated' },
    errors: [400, 402, 503],
  },
  {
    method: 'get',
    path: '/v1/sessions/:id',
    operationId: 'getSession',
    summary: 'One session',
    tag: 'sessions',
    auth: true,
    responses: { 200: 'Session' },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/sessions/:id/exec',
    operationId: 'sessionExec',
    summary: 'Run a command in the session',
    tag: 'sessions',
    auth: true,
    body: 'SessionExecRequest',
    responses: { 200: 'SessionExecResult' },
    errors: [400, 404, 409, 410, 413],
  },
  {
    method: 'delete',
    path: '/v1/sessions/:id',
    operationId: 'destroySession',
    summary: 'Destroy the session (legacy proof form)',
    tag: 'sessions',
    auth: true,
    responses: { 200: 'SessionDestroyed' },
    errors: [404, 409, 410],
  },
  // Egress.
  {
    method: 'post',
    path: '/v1/egress/profiles',
    operationId: 'createEgressProfile',
    summary: 'Create an egress profile',
    tag: 'egress',
    auth: true,
    idempotent: true,
    body: 'EgressProfileRequest',
    responses: { 201: 'EgressProfile' },
    headers: { Location: 'the new profile' },
    errors: [400, 403, 409],
  },
  {
    method: 'get',
    path: '/v1/egress/profiles',
    operationId: 'listEgressProfiles',
    summary: 'List egress profiles',
    tag: 'egress',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'EgressProfilePage' },
    errors: [400, 403],
  },
  {
    method: 'get',
    path: '/v1/egress/profiles/:id',
    operationId: 'getEgressProfile',
    summary: 'One egress profile with its rules',
    tag: 'egress',
    auth: true,
    responses: { 200: 'EgressProfileDetail' },
    errors: [403, 404],
  },
  {
    method: 'put',
    path: '/v1/egress/profiles/:id',
    operationId: 'updateEgressProfile',
    summary: 'Rename or describe a profile',
    tag: 'egress',
    auth: true,
    body: 'EgressProfileUpdate',
    responses: { 200: 'EgressProfileDetail' },
    errors: [400, 403, 404, 409],
  },
  {
    method: 'delete',
    path: '/v1/egress/profiles/:id',
    operationId: 'deleteEgressProfile',
    summary: 'Delete a profile',
    tag: 'egress',
    auth: true,
    responses: { 204: null },
    errors: [403, 404, 409],
  },
  {
    method: 'post',
    path: '/v1/egress/profiles/:id/rules',
    operationId: 'addEgressRule',
    summary: 'Add a rule to a profile',
    tag: 'egress',
    auth: true,
    idempotent: true,
    body: 'EgressRuleRequest',
    responses: { 201: 'EgressRule' },
    errors: [400, 403, 404, 409],
  },
  {
    method: 'get',
    path: '/v1/egress/profiles/:id/rules',
    operationId: 'listEgressRules',
    summary: 'Rules of a profile',
    tag: 'egress',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'EgressRulePage' },
    errors: [400, 403, 404],
  },
  {
    method: 'delete',
    path: '/v1/egress/profiles/:id/rules/:rid',
    operationId: 'deleteEgressRule',
    summary: 'Remove a rule',
    tag: 'egress',
    auth: true,
    responses: { 204: null },
    errors: [403, 404],
  },
  {
    method: 'get',
    path: '/v1/egress',
    operationId: 'listAllEgressRules',
    summary: 'Every rule of the account',
    tag: 'egress',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'EgressRulePage' },
    errors: [400, 403],
  },
  {
    method: 'post',
    path: '/v1/egress',
    operationId: 'addDefaultEgressRule',
    summary: 'Add a rule to the profile named "default"',
    tag: 'egress',
    auth: true,
    idempotent: true,
    body: 'EgressRuleRequest',
    responses: { 201: 'EgressRule' },
    errors: [400, 403, 409],
  },
  {
    method: 'delete',
    path: '/v1/egress/:id',
    operationId: 'deleteAnyEgressRule',
    summary: 'Remove a rule by id',
    tag: 'egress',
    auth: true,
    responses: { 204: null },
    errors: [403, 404],
  },
  // API keys and MFA.
  {
    method: 'get',
    path: '/v1/api-keys',
    operationId: 'listApiKeys',
    summary: 'List API keys',
    tag: 'accounts',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'ApiKeyPage' },
    errors: [400],
  },
  {
    method: 'post',
    path: '/v1/api-keys',
    operationId: 'createApiKey',
    summary: 'Issue an API key (shown once)',
    tag: 'accounts',
    auth: true,
    mfa: true,
    body: 'CreateApiKeyRequest',
    responses: { 201: 'ApiKeyCreated' },
    errors: [400, 403, 409],
  },
  {
    method: 'delete',
    path: '/v1/api-keys/:id',
    operationId: 'revokeApiKey',
    summary: 'Revoke an API key',
    tag: 'accounts',
    auth: true,
    mfa: true,
    responses: { 200: 'ApiKeyRevoked' },
    errors: [403, 404, 409],
  },
  {
    method: 'post',
    path: '/v1/api-keys/:id/rotate',
    operationId: 'rotateApiKey',
    summary: 'Issue a successor; the old key works for grace_seconds',
    tag: 'accounts',
    auth: true,
    mfa: true,
    body: 'RotateApiKeyRequest',
    responses: { 201: 'ApiKeyCreated' },
    errors: [400, 403, 404, 409],
  },
  {
    method: 'get',
    path: '/v1/mfa',
    operationId: 'mfaStatus',
    summary: 'MFA state',
    tag: 'accounts',
    auth: true,
    responses: { 200: 'MfaStatus' },
  },
  {
    method: 'post',
    path: '/v1/mfa/enroll',
    operationId: 'mfaEnroll',
    summary: 'Start TOTP enrollment',
    tag: 'accounts',
    auth: true,
    body: 'EmptyRequest',
    responses: { 201: 'MfaEnrollment' },
    errors: [400, 409],
  },
  {
    method: 'post',
    path: '/v1/mfa/activate',
    operationId: 'mfaActivate',
    summary: 'Activate TOTP with a first code',
    tag: 'accounts',
    auth: true,
    body: 'MfaCodeRequest',
    responses: { 200: 'MfaActivated' },
    errors: [400, 403, 409],
  },
  {
    method: 'post',
    path: '/v1/mfa/verify',
    operationId: 'mfaVerify',
    summary: 'Verify a TOTP or recovery code',
    tag: 'accounts',
    auth: true,
    body: 'MfaCodeRequest',
    responses: { 200: 'MfaVerified' },
    errors: [400, 403, 409],
  },
  {
    method: 'delete',
    path: '/v1/mfa',
    operationId: 'mfaRemove',
    summary: 'Remove MFA',
    tag: 'accounts',
    auth: true,
    mfa: true,
    responses: { 204: null },
    errors: [403, 409],
  },
  // Usage and billing.
  {
    method: 'get',
    path: '/v1/usage/summary',
    operationId: 'usageSummary',
    summary: 'Usage of the current cycle',
    tag: 'usage',
    auth: true,
    responses: { 200: 'UsageSummary' },
  },
  {
    method: 'get',
    path: '/v1/usage/estimate',
    operationId: 'usageEstimate',
    summary: 'Projected charges of the cycle',
    tag: 'usage',
    auth: true,
    responses: { 200: 'UsageEstimate' },
  },
  {
    method: 'get',
    path: '/v1/usage/items',
    operationId: 'usageItems',
    summary: 'Usage items',
    tag: 'usage',
    auth: true,
    paged: true,
    query: [...paging, ...range],
    responses: { 200: 'UsageItemPage' },
    errors: [400],
  },
  {
    method: 'get',
    path: '/v1/usage/items.csv',
    operationId: 'usageItemsCsv',
    summary: 'Usage items as RFC 4180 CSV',
    tag: 'usage',
    auth: true,
    query: range,
    responses: { 200: { media: 'text/csv', description: 'header row, then one row per item' } },
    errors: [400],
  },
  {
    method: 'post',
    path: '/v1/billing/checkout',
    operationId: 'checkout',
    summary: 'Start a checkout for a tier',
    tag: 'billing',
    auth: true,
    idempotent: true,
    body: 'CheckoutRequest',
    responses: { 200: 'Checkout' },
    errors: [400, 409, 503],
  },
  {
    method: 'post',
    path: '/v1/billing/webhook',
    operationId: 'billingWebhook',
    summary: 'Payment processor events (signed)',
    tag: 'billing',
    auth: false,
    body: { media: 'application/json', description: 'the processor event, verified on the raw bytes' },
    responses: { 200: 'WebhookAck' },
    errors: [400, 413, 429],
  },
  // Webhooks (docs/WEBHOOKS.md); writes pass the MFA gate.
  {
    method: 'post',
    path: '/v1/webhooks',
    operationId: 'createWebhook',
    summary: 'Register a webhook endpoint (the signing secret is shown once)',
    tag: 'webhooks',
    auth: true,
    mfa: true,
    body: 'WebhookRequest',
    responses: { 201: 'WebhookCreated' },
    headers: { Location: 'the new endpoint' },
    errors: [400, 402],
  },
  {
    method: 'get',
    path: '/v1/webhooks',
    operationId: 'listWebhooks',
    summary: 'List webhook endpoints, newest first',
    tag: 'webhooks',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'WebhookEndpointPage' },
    errors: [400],
  },
  {
    method: 'get',
    path: '/v1/webhooks/:id',
    operationId: 'getWebhook',
    summary: 'One webhook endpoint',
    tag: 'webhooks',
    auth: true,
    responses: { 200: 'WebhookEndpoint' },
    errors: [404],
  },
  {
    method: 'put',
    path: '/v1/webhooks/:id',
    operationId: 'updateWebhook',
    summary: 'Change url, events, description or active',
    tag: 'webhooks',
    auth: true,
    mfa: true,
    body: 'WebhookUpdate',
    responses: { 200: 'WebhookEndpoint' },
    errors: [400, 404],
  },
  {
    method: 'delete',
    path: '/v1/webhooks/:id',
    operationId: 'deleteWebhook',
    summary: 'Delete a webhook endpoint and its pending attempts',
    tag: 'webhooks',
    auth: true,
    mfa: true,
    responses: { 204: null },
    errors: [404],
  },
  {
    method: 'post',
    path: '/v1/webhooks/:id/test',
    operationId: 'testWebhook',
    summary: 'Send a webhook.test event now; the attempt record',
    tag: 'webhooks',
    auth: true,
    mfa: true,
    responses: { 200: 'WebhookDelivery' },
    errors: [404],
  },
  {
    method: 'get',
    path: '/v1/webhooks/:id/deliveries',
    operationId: 'listWebhookDeliveries',
    summary: 'Delivery attempts to an endpoint, newest first',
    tag: 'webhooks',
    auth: true,
    paged: true,
    query: paging,
    responses: { 200: 'WebhookDeliveryPage' },
    errors: [400, 404],
  },
  // Enterprise admin.
  {
    method: 'get',
    path: '/v1/admin/degradation',
    operationId: 'adminDegradation',
    summary: 'Active degradation modes of the account (Enterprise)',
    tag: 'admin',
    auth: true,
    mfa: true,
    responses: { 200: 'AdminDegradation' },
    errors: [403],
  },
  {
    method: 'get',
    path: '/v1/admin/dlq',
    operationId: 'adminDeadLetters',
    summary: 'Dead-lettered webhook deliveries not yet replayed (Enterprise)',
    tag: 'admin',
    auth: true,
    mfa: true,
    paged: true,
    query: paging,
    responses: { 200: 'WebhookDeliveryPage' },
    errors: [400, 403],
  },
  {
    method: 'post',
    path: '/v1/admin/dlq/replay',
    operationId: 'adminReplayDeadLetters',
    summary: 'Re-queue dead letters, all or the listed ones (Enterprise)',
    tag: 'admin',
    auth: true,
    mfa: true,
    body: 'DlqReplayRequest',
    responses: { 202: 'DlqReplayed' },
    errors: [400, 403],
  },
];

/** `/v1/capsules/:id` → `/v1/capsules/{id}`. */
export const openapiPath = (p: string): string => p.replace(/[:*]([A-Za-z_]+)/g, '{$1}');

function jsonSchema(schema: z.ZodType, io: 'input' | 'output'): Record<string, unknown> {
  const s = z.toJSONSchema(schema, { target: 'draft-2020-12', io, unrepresentable: 'any' }) as Record<string, unknown>;
  delete s['$schema'];
  return s;
}

const ref = (name: string) => ({ $ref: `#/components/schemas/${name}` });

const REQUEST_SCHEMAS = new Set<string>(
  OPERATIONS.flatMap((o) => (typeof o.body === 'string' ? [o.body] : [])).concat([
    'EgressProfileRequest',
    'EgressProfileUpdate',
    'EgressRuleRequest',
  ]),
);

function content(r: keyof typeof SCHEMAS | MediaSpec): Record<string, unknown> {
  if (typeof r === 'string') return { 'application/json': { schema: ref(r) } };
  const out: Record<string, unknown> = {
    [r.media]: {
      schema: r.media.startsWith('application/json') ? { type: 'object' } : { type: 'string', format: 'binary' },
    },
  };
  if (r.json) out['application/json'] = { schema: ref(r.json) };
  return out;
}

const ALWAYS_AUTH = [401, 429, 500];
const ALWAYS_PUBLIC = [500];

/** The OpenAPI 3.1 document. Deterministic: the same registry gives the same bytes. */
export function openapiDocument(version: string): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const o of OPERATIONS) {
    const path = openapiPath(o.path);
    const params: Record<string, unknown>[] = [];
    for (const m of o.path.matchAll(/[:*]([A-Za-z_]+)/g))
      params.push({ name: m[1], in: 'path', required: true, schema: { type: 'string' } });
    for (const q of o.query ?? [])
      params.push({
        name: q.name,
        in: 'query',
        required: q.required,
        description: q.description,
        schema: { type: 'string' },
      });
    if (o.idempotent)
      params.push({
        name: 'Idempotency-Key',
        in: 'header',
        required: false,
        description: 'replays the first answer for 24 h (at most 255 visible ASCII characters)',
        schema: { type: 'string', maxLength: 255 },
      });
    params.push({ $ref: '#/components/parameters/TraceId' });
    const responses: Record<string, unknown> = {};
    for (const [status, r] of Object.entries(o.responses)) {
      const headers: Record<string, unknown> = { 'X-Svc-Request-Id': { $ref: '#/components/headers/RequestId' } };
      for (const [h, d] of Object.entries(o.headers ?? {})) headers[h] = { description: d, schema: { type: 'string' } };
      responses[status] =
        r === null
          ? { description: 'no content', headers }
          : { description: typeof r === 'string' ? r : r.description, headers, content: content(r) };
    }
    const errs = new Set([...(o.auth ? ALWAYS_AUTH : ALWAYS_PUBLIC), ...(o.errors ?? []), ...(o.mfa ? [403] : [])]);
    for (const status of [...errs].sort())
      responses[String(status)] = { $ref: `#/components/responses/Error${status}` };
    const op: Record<string, unknown> = {
      operationId: o.operationId,
      summary: o.summary,
      tags: [o.tag],
      security: o.auth ? [{ bearer: [] }] : [],
      parameters: params,
      responses,
    };
    if (o.idempotent) op['x-idempotent'] = true;
    if (o.paged) op['x-paged'] = true;
    if (o.body !== undefined) op.requestBody = { required: true, content: content(o.body) };
    (paths[path] ??= {})[o.method] = op;
  }
  const schemas: Record<string, unknown> = {};
  for (const name of Object.keys(SCHEMAS).sort()) {
    const s = SCHEMAS[name as keyof typeof SCHEMAS] as z.ZodType;
    schemas[name] = jsonSchema(s, REQUEST_SCHEMAS.has(name) ? 'input' : 'output');
  }
  const errorResponses: Record<string, unknown> = {};
  const byStatus = new Map<number, string[]>();
  for (const [code, row] of Object.entries(ERROR_TABLE))
    byStatus.set(row.status, [...(byStatus.get(row.status) ?? []), code]);
  for (const [status, codes] of [...byStatus].sort((a, b) => a[0] - b[0])) {
    const headers: Record<string, unknown> = { 'X-Svc-Request-Id': { $ref: '#/components/headers/RequestId' } };
    if (status === 429 || status === 503)
      headers['Retry-After'] = { description: 'seconds', schema: { type: 'integer' } };
    errorResponses[`Error${status}`] = {
      description: `error envelope: ${codes.join(', ')}`,
      headers,
      content: { 'application/json': { schema: ref('ErrorEnvelope') } },
    };
  }
  return {
    openapi: '3.1.0',
    info: {
      title: 'Capsule API',
      version,
      description:
        'Sealed, short-lived Linux capsules for regulated data, with signed hash-chained destruction proofs (AuditProof). Generated from the route registry (control-plane/http/openapi.ts).',
      license: { name: 'UNLICENSED', identifier: 'UNLICENSED' },
    },
    servers: [{ url: '/' }],
    tags: [...new Set(OPERATIONS.map((o) => o.tag))].map((name) => ({ name, description: `${name} operations` })),
    paths,
    components: {
      securitySchemes: { bearer: { type: 'http', scheme: 'bearer', description: 'API key' } },
      parameters: {
        TraceId: {
          name: 'X-Svc-Trace-Id',
          in: 'header',
          required: false,
          description: 'propagated through logs and echoed back',
          schema: { type: 'string', pattern: '^[A-Za-z0-9._:-]{1,128}$' },
        },
      },
      headers: { RequestId: { description: "this request's id (req_...)", schema: { type: 'string' } } },
      responses: errorResponses,
      schemas,
    },
  };
}

/** The registry entry of a served route, for response validation in tests. */
export function operationFor(method: string, koaPath: string): Operation | undefined {
  return OPERATIONS.find((o) => o.method === method.toLowerCase() && o.path === koaPath);
}
