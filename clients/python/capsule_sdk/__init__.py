"""capsule_sdk: Python client of the Capsule API and an independent offline AuditProof verifier."""

from .client import AsyncClient, Client, DEFAULT_TIMEOUTS
from .conventions import (
    PARENT_PROOF_KEY, RECORDS_FILE, RESULTS_FILE, STATE_FILE,
    arun_batch, arun_session, run_batch, run_session, run_session_step,
)
from .errors import *  # noqa: F401,F403 - one class per error code
from .errors import CapsuleError, ERROR_CLASSES
from .verify import canonicalize, verdict_line, verify_proof, verify_proof_json

__all__ = [
    "Client", "AsyncClient", "DEFAULT_TIMEOUTS", "CapsuleError", "ERROR_CLASSES",
    "verify_proof", "verify_proof_json", "verdict_line", "canonicalize",
    "run_batch", "run_session", "run_session_step", "arun_batch", "arun_session",
    "RECORDS_FILE", "RESULTS_FILE", "STATE_FILE", "PARENT_PROOF_KEY",
]
