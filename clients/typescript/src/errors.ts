// One error class per API error code (the service's closed set), each
// carrying what the envelope says: request id, retry_after, reason, field.

export interface ErrorBody {
  type?: string;
  code?: string;
  message?: string;
  doc_url?: string;
  request_id?: string;
  retry_after?: number;
  reason?: string;
  field?: string;
  [member: string]: unknown;
}

/** Any failure of a call: an error answer of the service, a time-out or a network failure. */
export class CapsuleError extends Error {
  /** The service's error code (`network_error`, `timeout`, `digest_mismatch` for failures of the client's own). */
  readonly code: string;
  /** HTTP status; 0 when no answer arrived. */
  readonly status: number;
  readonly requestId: string | null;
  /** Seconds the service asked to wait (429, 503), from the body or the Retry-After header. */
  readonly retryAfter: number | null;
  readonly reason: string | null;
  /** The request member an invalid_parameters / payload_too_large error is about. */
  readonly field: string | null;
  readonly type: string | null;
  readonly docUrl: string | null;
  /** The whole error member of the envelope. */
  readonly body: ErrorBody;
  /** How many attempts the call made. */
  attempts = 1;

  constructor(status: number, body: ErrorBody, retryAfterHeader: number | null = null, cause?: unknown) {
    super(body.message ?? `HTTP ${status}`, cause === undefined ? undefined : { cause });
    this.name = new.target.name;
    this.code = body.code ?? 'unknown_error';
    this.status = status;
    this.requestId = body.request_id ?? null;
    this.retryAfter = typeof body.retry_after === 'number' ? body.retry_after : retryAfterHeader;
    this.reason = typeof body.reason === 'string' ? body.reason : null;
    this.field = typeof body.field === 'string' ? body.field : null;
    this.type = body.type ?? null;
    this.docUrl = body.doc_url ?? null;
    this.body = body;
  }
}

export class InvalidParametersError extends CapsuleError {}
export class InvalidApiKeyError extends CapsuleError {}
export class QuotaExceededError extends CapsuleError {}
export class MfaRequiredError extends CapsuleError {}
export class MfaEnrollmentRequiredError extends CapsuleError {}
export class TierRequiredError extends CapsuleError {}
export class ResourceNotFoundError extends CapsuleError {}
export class ResourceConflictError extends CapsuleError {}
export class CapsuleExpiredError extends CapsuleError {}
export class PayloadTooLargeError extends CapsuleError {}
export class InputProvenanceRejectedError extends CapsuleError {}
export class SecretsInjectionRejectedError extends CapsuleError {}
export class RateLimitedError extends CapsuleError {}
export class InternalError extends CapsuleError {}
export class ServiceUnavailableError extends CapsuleError {}
/** No answer: connection refused or reset, DNS failure. */
export class NetworkError extends CapsuleError {}
/** No answer within the call's time-out. */
export class TimeoutError extends CapsuleError {}
/** A downloaded file whose SHA-512 differs from X-Svc-File-Sha512. */
export class DigestMismatchError extends CapsuleError {}

export const ERROR_CLASSES: Record<string, typeof CapsuleError> = {
  invalid_parameters: InvalidParametersError,
  invalid_api_key: InvalidApiKeyError,
  quota_exceeded: QuotaExceededError,
  mfa_required: MfaRequiredError,
  mfa_enrollment_required: MfaEnrollmentRequiredError,
  tier_required: TierRequiredError,
  resource_not_found: ResourceNotFoundError,
  resource_conflict: ResourceConflictError,
  capsule_expired: CapsuleExpiredError,
  payload_too_large: PayloadTooLargeError,
  input_provenance_rejected: InputProvenanceRejectedError,
  secrets_injection_rejected: SecretsInjectionRejectedError,
  rate_limited: RateLimitedError,
  internal_error: InternalError,
  service_unavailable: ServiceUnavailableError,
};

/** The class for an error answer: by code, else by status family. */
export function errorFor(status: number, body: ErrorBody, retryAfterHeader: number | null): CapsuleError {
  const byCode = body.code !== undefined ? ERROR_CLASSES[body.code] : undefined;
  const Cls =
    byCode ??
    (status === 429
      ? RateLimitedError
      : status === 503
        ? ServiceUnavailableError
        : status >= 500
          ? InternalError
          : CapsuleError);
  return new Cls(status, body, retryAfterHeader);
}
