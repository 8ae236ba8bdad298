// THE error table: every ErrorCode's HTTP status and `type`, and the one
// envelope builder. Nothing else assigns statuses to errors.
import { ApiError, type ErrorCode } from '../../shared/errors.js';

export const ERROR_TABLE: Record<ErrorCode, { status: number; type: string }> = {
  invalid_parameters: { status: 400, type: 'invalid_request_error' },
  invalid_api_key: { status: 401, type: 'authentication_error' },
  quota_exceeded: { status: 402, type: 'quota_error' },
  mfa_required: { status: 403, type: 'mfa_required' },
  mfa_enrollment_required: { status: 403, type: 'mfa_enrollment_required' },
  tier_required: { status: 403, type: 'forbidden' },
  resource_not_found: { status: 404, type: 'not_found' },
  resource_conflict: { status: 409, type: 'conflict_error' },
  capsule_expired: { status: 410, type: 'capsule_error' },
  payload_too_large: { status: 413, type: 'invalid_request_error' },
  input_provenance_rejected: { status: 422, type: 'input_provenance_error' },
  secrets_injection_rejected: { status: 422, type: 'secrets_injection_error' },
  rate_limited: { status: 429, type: 'rate_limit_error' },
  internal_error: { status: 500, type: 'api_error' },
  service_unavailable: { status: 503, type: 'service_unavailable' },
};

/**
 * Envelope members an ApiError may add: the SPEC's retry_after, reason, 422
 * extras and degradation_mode, plus `field` (the request member a 400 or 413
 * is about, also named in `message`), `line` (of a Capsulefile.yaml) and
 * `limit` (which quota a 402 reached) for client libraries.
 */
const EXTRA_ALLOWED = new Set([
  'retry_after',
  'reason',
  'input_hash',
  'secret_id',
  'degradation_mode',
  'field',
  'line',
  'limit',
]);

export interface Rendered {
  status: number;
  body: { error: Record<string, unknown> };
  retryAfter: number | null;
}

/** Converts anything thrown into the SPEC envelope; unknown errors become a bare 500. */
export function renderError(err: unknown, requestId: string, docsUrl: string): Rendered {
  const e = err instanceof ApiError ? err : new ApiError('internal_error', 'internal error', { cause: err });
  const row = ERROR_TABLE[e.code];
  const error: Record<string, unknown> = {
    type: row.type,
    code: e.code,
    message: e.message,
    doc_url: `${docsUrl}/errors/${e.code}`,
    request_id: requestId,
  };
  for (const [k, v] of Object.entries(e.extra)) if (EXTRA_ALLOWED.has(k)) error[k] = v;
  let retryAfter: number | null = typeof error.retry_after === 'number' ? error.retry_after : null;
  if (e.code === 'service_unavailable' && retryAfter === null) {
    retryAfter = 5;
    error.retry_after = 5;
  }
  return { status: row.status, body: { error }, retryAfter };
}
