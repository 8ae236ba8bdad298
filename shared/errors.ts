// The closed set of API error codes (SPEC "Errors"). The HTTP status, `type`
// and envelope are assigned in exactly one table at the HTTP edge
// (control-plane/http/errors.ts); everything below it throws ApiError.

export const ERROR_CODES = [
  'invalid_parameters',
  'invalid_api_key',
  'quota_exceeded',
  'mfa_required',
  'mfa_enrollment_required',
  'tier_required',
  'resource_not_found',
  'resource_conflict',
  'capsule_expired',
  'payload_too_large',
  'input_provenance_rejected',
  'secrets_injection_rejected',
  'rate_limited',
  'internal_error',
  'service_unavailable',
] as const;

export type ErrorCode = (typeof ERROR_CODES)[number];

/**
 * An error whose `message` is safe to show the customer. `cause` is internal
 * (logged, never sent). Extra members (retry_after, reason, ...) go to the envelope.
 */
export class ApiError extends Error {
  readonly code: ErrorCode;
  readonly extra: Readonly<Record<string, unknown>>;
  constructor(code: ErrorCode, publicMessage: string, opts: { cause?: unknown; extra?: Record<string, unknown> } = {}) {
    super(publicMessage, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'ApiError';
    this.code = code;
    this.extra = opts.extra ?? {};
  }
}

export const invalid = (field: string, why: string): ApiError =>
  new ApiError('invalid_parameters', `${field}: ${why}`, { extra: { field } });
