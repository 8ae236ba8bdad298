// One documentation page per error code, served where every envelope's
// `doc_url` points (`{docs_url}/errors/<code>`): HTML, or JSON for
// `Accept: application/json`. Generated once from ERROR_TABLE and the causes
// and fixes below, so a code cannot exist without its page.
import { ERROR_CODES, type ErrorCode } from '../../shared/errors.js';
import { ERROR_TABLE } from './errors.js';

interface Guide {
  title: string;
  cause: string;
  fix: string;
  /** Envelope members this code adds besides the common ones. */
  extra?: Record<string, unknown>;
  message: string;
}

const GUIDES: Record<ErrorCode, Guide> = {
  invalid_parameters: {
    title: 'Invalid parameters',
    cause:
      'The request body or a query parameter is malformed, misses a required field, has an unknown field or a value out of range. `field` names the member, and `message` starts with it.',
    fix: 'Correct the named field and send the request again. Retrying unchanged gives the same answer.',
    extra: { field: 'ttl' },
    message: 'ttl: must be an integer',
  },
  invalid_api_key: {
    title: 'Invalid API key',
    cause:
      'The `Authorization` header is missing, is not `Bearer <API_KEY>`, or names a key that is unknown or revoked.',
    fix: 'Send `Authorization: Bearer svc_live_...` with the key shown at sign-up. A lost key needs a rotation through support.',
    message: 'API key is malformed, unknown or revoked',
  },
  quota_exceeded: {
    title: 'Quota exceeded',
    cause:
      "A quota of the account's tier is reached: capsules or proofs this month, concurrent capsules, or Capsulefile count. `limit` names which.",
    fix: 'Destroy capsules you no longer need, wait for the next billing cycle, or move to a higher tier. `GET /v1/customers/me` shows limits and usage.',
    extra: { limit: 'concurrent_capsules' },
    message: 'quota reached: concurrent capsules (3) for tier free',
  },
  mfa_required: {
    title: 'MFA required',
    cause: 'The endpoint needs a recent multi-factor verification.',
    fix: 'Complete MFA verification, then repeat the request.',
    message: 'recent MFA verification required',
  },
  mfa_enrollment_required: {
    title: 'MFA enrollment required',
    cause: 'A paid-tier account has no multi-factor method enrolled.',
    fix: 'Enroll an MFA method for the account, then repeat the request.',
    message: 'enroll MFA to use this endpoint',
  },
  tier_required: {
    title: 'Higher tier required',
    cause: 'The endpoint or field needs a higher tier, for example egress profiles (Team and above).',
    fix: 'Move the account to a higher tier, or leave out the field.',
    message: 'egress_profile_id: egress profiles need the Team tier or higher',
  },
  resource_not_found: {
    title: 'Resource not found',
    cause:
      "The id does not exist or belongs to another account (the two are not told apart), or the capsule's proof is asked for before it is destroyed.",
    fix: 'Check the id and the API key. A proof exists once the capsule is destroyed.',
    message: 'capsule not found',
  },
  resource_conflict: {
    title: 'Resource conflict',
    cause:
      'The request conflicts with the current state: a duplicate name, a capsule already destroyed, a finalized (immutable) Capsulefile, or a profile or Capsulefile in use by live capsules.',
    fix: 'Read the resource to see its current state; choose another name or wait until nothing uses it.',
    message: 'Capsulefile is finalized and immutable',
  },
  capsule_expired: {
    title: 'Capsule expired',
    cause: 'The capsule was destroyed (explicitly or because its TTL elapsed); it cannot run commands or take files.',
    fix: 'Create a new capsule. The proof of the old one is at `GET /v1/proofs/:capsule_id`.',
    message: 'capsule is destroyed; its proof is at GET /v1/proofs/cap_...',
  },
  payload_too_large: {
    title: 'Payload too large',
    cause:
      "A body or upload exceeds its bound: `command` 10 KB, `input_data` 512 KB, an upload the tier's `limits.upload_max_bytes`, other JSON bodies their route's bound.",
    fix: 'Send large inputs through the upload endpoint, split them, or move to a tier with a larger upload bound.',
    extra: { field: 'body', limit: 'upload_max_bytes' },
    message: 'body: exceeds 16777216 bytes, the upload bound of tier free (limits.upload_max_bytes)',
  },
  input_provenance_rejected: {
    title: 'Input provenance rejected',
    cause:
      'The declared input manifest hash does not match the bytes received, or the manifest signature failed. The capsule destroyed itself and the rejection is recorded in its proof.',
    fix: 'Recompute the manifest over the exact bytes you send and sign it with a registered key.',
    extra: { reason: 'hash_mismatch', input_hash: 'sha512:...' },
    message: 'input hash does not match the declared manifest',
  },
  secrets_injection_rejected: {
    title: 'Secrets injection rejected',
    cause: 'A declared environment-variable secret could not be resolved. The capsule destroyed itself.',
    fix: 'Check that the secret exists and that the service may decrypt it.',
    extra: { reason: 'secret_not_found', secret_id: 'sec_...' },
    message: 'secret could not be resolved',
  },
  rate_limited: {
    title: 'Rate limited',
    cause:
      'Too many requests per minute from this source address (public endpoints) or this account (`limits.rate_limit_rpm`), or too many open connections from this address.',
    fix: 'Wait `Retry-After` seconds (also `retry_after` in the body), then retry with exponential backoff and jitter; reuse connections.',
    extra: { retry_after: 12 },
    message: 'rate limit: 20 requests per minute for this account',
  },
  internal_error: {
    title: 'Internal error',
    cause: 'An unexpected failure inside the service. It is logged with the request id.',
    fix: 'Retry later; if it persists, contact support with the `request_id`.',
    message: 'internal error',
  },
  service_unavailable: {
    title: 'Service unavailable',
    cause:
      'A part the request needs is temporarily unavailable (for example the capsule runner), or the service is busy with large request bodies.',
    fix: 'Retry after `Retry-After` seconds with exponential backoff.',
    extra: { retry_after: 5 },
    message: 'the capsule runner is unavailable',
  },
};

export interface ErrorDoc {
  code: ErrorCode;
  http_status: number;
  type: string;
  title: string;
  cause: string;
  fix: string;
  example: { error: Record<string, unknown> };
}

/** The page's facts, as served for `Accept: application/json`. */
export function errorDoc(code: ErrorCode, docsUrl: string): ErrorDoc {
  const g = GUIDES[code];
  const row = ERROR_TABLE[code];
  return {
    code,
    http_status: row.status,
    type: row.type,
    title: g.title,
    cause: g.cause,
    fix: g.fix,
    example: {
      error: {
        type: row.type,
        code,
        message: g.message,
        doc_url: `${docsUrl}/errors/${code}`,
        request_id: 'req_0123456789abcdef01234567',
        ...(g.extra ?? {}),
      },
    },
  };
}

const esc = (s: string): string =>
  s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
/** `code` spans in the guide texts. */
const prose = (s: string): string => esc(s).replace(/`([^`]+)`/g, '<code>$1</code>');

export function errorDocHtml(doc: ErrorDoc): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>${esc(doc.code)}: ${esc(doc.title)}</title></head>
<body>
<h1><code>${esc(doc.code)}</code>: ${esc(doc.title)}</h1>
<p>HTTP ${doc.http_status}, <code>error.type</code> <code>${esc(doc.type)}</code></p>
<h2>Cause</h2>
<p>${prose(doc.cause)}</p>
<h2>Fix</h2>
<p>${prose(doc.fix)}</p>
<h2>Example</h2>
<pre>${esc(JSON.stringify(doc.example, null, 2))}</pre>
</body></html>
`;
}

/** Every page, built once: `html` and `json` per code. */
export function errorDocPages(docsUrl: string): Map<string, { html: string; json: ErrorDoc }> {
  return new Map(
    ERROR_CODES.map((code) => {
      const json = errorDoc(code, docsUrl);
      return [code, { html: errorDocHtml(json), json }];
    }),
  );
}
