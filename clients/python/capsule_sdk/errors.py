"""One exception class per API error code, carrying the envelope's members."""

from __future__ import annotations

from typing import Any, Optional


class CapsuleError(Exception):
    """Any failed call: an error answer, a time-out or a network failure."""

    def __init__(self, status: int, body: dict[str, Any], retry_after_header: Optional[int] = None):
        super().__init__(body.get("message") or f"HTTP {status}")
        self.status = status
        self.body = body
        self.code: str = body.get("code") or "unknown_error"
        self.type: Optional[str] = body.get("type")
        self.request_id: Optional[str] = body.get("request_id")
        ra = body.get("retry_after")
        self.retry_after: Optional[int] = ra if isinstance(ra, int) and not isinstance(ra, bool) else retry_after_header
        self.reason: Optional[str] = body.get("reason") if isinstance(body.get("reason"), str) else None
        self.field: Optional[str] = body.get("field") if isinstance(body.get("field"), str) else None
        self.doc_url: Optional[str] = body.get("doc_url")
        self.attempts = 1


class InvalidParametersError(CapsuleError): pass
class InvalidApiKeyError(CapsuleError): pass
class QuotaExceededError(CapsuleError): pass
class MfaRequiredError(CapsuleError): pass
class MfaEnrollmentRequiredError(CapsuleError): pass
class TierRequiredError(CapsuleError): pass
class ResourceNotFoundError(CapsuleError): pass
class ResourceConflictError(CapsuleError): pass
class CapsuleExpiredError(CapsuleError): pass
class PayloadTooLargeError(CapsuleError): pass
class InputProvenanceRejectedError(CapsuleError): pass
class SecretsInjectionRejectedError(CapsuleError): pass
class RateLimitedError(CapsuleError): pass
class InternalError(CapsuleError): pass
class ServiceUnavailableError(CapsuleError): pass
class NetworkError(CapsuleError):
    """No answer: connection refused or reset."""
class TimeoutError(CapsuleError):  # noqa: A001 - the SDK's own, distinct from the builtin
    """No answer within the call's time-out."""
class DigestMismatchError(CapsuleError):
    """A download whose SHA-512 differs from X-Svc-File-Sha512."""


ERROR_CLASSES: dict[str, type[CapsuleError]] = {
    "invalid_parameters": InvalidParametersError,
    "invalid_api_key": InvalidApiKeyError,
    "quota_exceeded": QuotaExceededError,
    "mfa_required": MfaRequiredError,
    "mfa_enrollment_required": MfaEnrollmentRequiredError,
    "tier_required": TierRequiredError,
    "resource_not_found": ResourceNotFoundError,
    "resource_conflict": ResourceConflictError,
    "capsule_expired": CapsuleExpiredError,
    "payload_too_large": PayloadTooLargeError,
    "input_provenance_rejected": InputProvenanceRejectedError,
    "secrets_injection_rejected": SecretsInjectionRejectedError,
    "rate_limited": RateLimitedError,
    "internal_error": InternalError,
    "service_unavailable": ServiceUnavailableError,
}


def error_for(status: int, body: dict[str, Any], retry_after_header: Optional[int]) -> CapsuleError:
    cls = ERROR_CLASSES.get(body.get("code") or "")
    if cls is None:
        cls = (RateLimitedError if status == 429 else ServiceUnavailableError if status == 503
               else InternalError if status >= 500 else CapsuleError)
    return cls(status, body, retry_after_header)
