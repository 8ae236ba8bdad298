"""Offline AuditProof verification: a second, independent implementation of the
proof wire contract (docs/PROOF_FORMAT.md): RFC 8785 JCS, the SHA-512 step
chain, the canonical view, the RFC 6962-style activity Merkle root with
SHA-512, and Ed25519 (RFC 8032) through the ``cryptography`` package.

``verify_proof`` never raises: every input gets a result shaped like the
online endpoint's (``valid``, ``stage_reached``, ``failure_reason``,
``checks``, ``verified_at``).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
from datetime import datetime, timezone
from typing import Any, Callable, Optional

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

SUPPORTED_VERSIONS = ("1.0", "2.0", "2.1")
STAGE_NAMES = (
    "parse and version",
    "step count",
    "chain",
    "final hash",
    "canonical hash and activity root",
    "signature",
    "key resolution",
)
# step, subsystem, operation, method: the fixed step table (chain inputs).
STEPS = (
    (1, "eee_namespace", "environment_isolation", "procfs_verification"),
    (2, "eee_tmpfs", "filesystem_isolation", "mountinfo_verification"),
    (3, "eee_memory", "multipass_wipe", "dod_5220_multipass_wipe"),
    (4, "dire_keys", "key_destruction", "ed25519_key_destruction"),
    (5, "dire_identity", "credential_incineration", "credential_incineration"),
    (6, "fgx_forensic", "merkle_zero_state", "merkle_tree_verification"),
    (7, "rzl_audit", "chain_integrity_seal", "hash_chain_validation"),
    (8, "capsule_destroy", "lifecycle_completion", "capsule_lifecycle_verification"),
)
STEP_COUNT = 8
GENESIS_HEX = hashlib.sha512(b"").hexdigest()
VIEW_MEMBERS = (
    "cdp_version", "capsule_id", "created_at", "destroyed_at", "completeness", "reason", "chain",
    "final_hash", "capsule_context", "termination", "regulatory_context", "component_proofs",
    "activity_root", "signing_authority_id", "signing_key_version",
)
ATTESTATION_VIEW_MEMBERS = ("algorithm", "public_key", "key_id")
MAX_DEPTH = 200

_SHA512_RE = re.compile(r"^sha512:[0-9a-f]{128}\Z")
_SHA256_RE = re.compile(r"^sha256:[0-9a-f]{64}\Z")
_B64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}\Z")


class JcsError(ValueError):
    """The value is not JSON data (RFC 8785 cannot serialize it)."""


# ---------------------------------------------------------------- RFC 8785 JCS

def _number(v: float) -> str:
    """ECMAScript Number::toString (RFC 8785 section 3.2.2.3)."""
    if not math.isfinite(v):
        raise JcsError("non-finite number is not JSON")
    if v == 0:
        return "0"
    sign = "-" if v < 0 else ""
    r = repr(abs(v))  # shortest round-trip digits, as ECMAScript uses
    mant, _, exp = r.partition("e")
    e = int(exp) if exp else 0
    if "." in mant:
        ip, fp = mant.split(".")
    else:
        ip, fp = mant, ""
    digits = (ip + fp).lstrip("0")
    # value = 0.<digits> * 10^n  with the digits' leading zeros removed
    n = len(ip) + e - (len(ip + fp) - len((ip + fp).lstrip("0")))
    digits = digits.rstrip("0") or "0"
    k = len(digits)
    if k <= n <= 21:
        out = digits + "0" * (n - k)
    elif 0 < n <= 21:
        out = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        out = "0." + "0" * (-n) + digits
    else:
        x = n - 1
        es = ("+" if x >= 0 else "-") + str(abs(x))
        out = (digits if k == 1 else digits[0] + "." + digits[1:]) + "e" + es
    return sign + out


def _quote(s: str) -> str:
    out = ['"']
    for ch in s:
        c = ord(ch)
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif c < 0x20:
            out.append({8: "\\b", 9: "\\t", 10: "\\n", 12: "\\f", 13: "\\r"}.get(c, "\\u%04x" % c))
        elif 0xD800 <= c <= 0xDFFF:
            out.append("\\u%04x" % c)  # a lone surrogate, escaped as JSON.stringify does
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _utf16_key(k: str) -> bytes:
    return k.encode("utf-16-be", "surrogatepass")


def serialize(value: Any, depth: int = 0) -> str:
    """RFC 8785 canonical JSON of a parsed JSON value."""
    if isinstance(value, str):
        return _quote(value)
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, int):
        # JSON numbers are IEEE doubles: an integer beyond 2^53 prints as the double it parses to.
        return str(value) if abs(value) < 2**53 else _number(float(value))
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, (list, tuple)):
        if depth >= MAX_DEPTH:
            raise JcsError("nesting too deep")
        return "[" + ",".join(serialize(v, depth + 1) for v in value) + "]"
    if isinstance(value, dict):
        if depth >= MAX_DEPTH:
            raise JcsError("nesting too deep")
        keys = sorted(value.keys(), key=_utf16_key)
        return "{" + ",".join(_quote(k) + ":" + serialize(value[k], depth + 1) for k in keys) + "}"
    raise JcsError(f"a {type(value).__name__} is not JSON data")


def canonicalize(value: Any) -> str:
    return serialize(value, 0)


def _utf8(s: str) -> bytes:
    # A lone surrogate cannot be UTF-8: replaced by U+FFFD as a browser's TextEncoder does.
    return s.encode("utf-8", "replace") if any(0xD800 <= ord(c) <= 0xDFFF for c in s) else s.encode("utf-8")


def sha512_hex(data: bytes) -> str:
    return hashlib.sha512(data).hexdigest()


# ---------------------------------------------------------------- chain, view, Merkle

def chain_hashes(destroyed_at: str) -> list[str]:
    """The 8 chain hashes (hex) for a destruction time."""
    prev = GENESIS_HEX
    out = []
    for _, subsystem, _, method in STEPS:
        prev = sha512_hex(b"\x00".join(_utf8(x) for x in (prev, subsystem, "destroy", method, destroyed_at)))
        out.append(prev)
    return out


def canonical_view_jcs(doc: dict) -> str:
    parts = []
    for k in sorted(VIEW_MEMBERS + ("attestation",)):
        if k not in doc:
            continue
        v = doc[k]
        if k == "attestation" and isinstance(v, dict):
            inner = ",".join(
                _quote(a) + ":" + serialize(v[a], 2) for a in sorted(ATTESTATION_VIEW_MEMBERS) if a in v
            )
            parts.append(_quote(k) + ":{" + inner + "}")
        else:
            parts.append(_quote(k) + ":" + serialize(v, 1))
    return "{" + ",".join(parts) + "}"


def canonical_hash(doc: dict) -> str:
    return "sha512:" + sha512_hex(_utf8(canonical_view_jcs(doc)))


def merkle_root_hex(leaf_jcs: list[str]) -> str:
    """RFC 6962 tree hash with SHA-512: leaf H(0x00||d), node H(0x01||l||r), empty H("")."""
    def root(nodes: list[bytes]) -> bytes:
        if len(nodes) == 1:
            return nodes[0]
        k = 1
        while k * 2 < len(nodes):
            k *= 2
        return hashlib.sha512(b"\x01" + root(nodes[:k]) + root(nodes[k:])).digest()

    if not leaf_jcs:
        return GENESIS_HEX
    return root([hashlib.sha512(b"\x00" + _utf8(j)).digest() for j in leaf_jcs]).hex()


def activity_root(events: list) -> str:
    return "sha512:" + merkle_root_hex([serialize(e, 0) for e in events])


# ---------------------------------------------------------------- stage 0: parse and version

class _Fail(Exception):
    def __init__(self, type_: str, reason: str, stage: int = 0):
        super().__init__(f"{type_}/{reason}")
        self.type = type_
        self.reason = reason
        self.stage = stage


def _is_int(v: Any) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, int):
        return True
    return isinstance(v, float) and math.isfinite(v) and v.is_integer()


def _str(o: dict, k: str, required: bool) -> Optional[str]:
    if k not in o:
        if required:
            raise _Fail("FormatInvalid", "MissingField")
        return None
    v = o[k]
    if not isinstance(v, str):
        raise _Fail("FormatInvalid", "WrongType")
    return v


def _is_sha512(s: str) -> bool:
    return len(s) == 135 and _SHA512_RE.match(s) is not None


def _is_legacy_hash(s: str) -> bool:
    return _SHA256_RE.match(s) is not None or _is_sha512(s)


def _hash(o: dict, k: str, required: bool, ok: Callable[[str], bool]) -> Optional[str]:
    v = _str(o, k, required)
    if v is not None and not ok(v):
        raise _Fail("FormatInvalid", "BadHashFormat")
    return v


def _steps(doc: dict, legacy: bool) -> list[tuple[Any, str, str]]:
    if "chain" not in doc:
        raise _Fail("FormatInvalid", "MissingField")
    chain = doc["chain"]
    if not isinstance(chain, list):
        raise _Fail("FormatInvalid", "WrongType")
    steps = []
    for s in chain:
        if not isinstance(s, dict):
            raise _Fail("FormatInvalid", "WrongType")
        if "step" not in s:
            raise _Fail("FormatInvalid", "MissingField")
        step = s["step"]
        if not _is_int(step):
            raise _Fail("FormatInvalid", "WrongType")
        subsystem = _str(s, "subsystem", True)
        _str(s, "operation", not legacy)
        if not legacy:
            _hash(s, "evidence_hash", True, _is_sha512)
        chain_hash = _hash(s, "chain_hash", True, _is_legacy_hash if legacy else _is_sha512)
        steps.append((step, subsystem, chain_hash))
    return steps


def _attestation(doc: dict) -> Optional[dict]:
    if "attestation" not in doc:
        return None
    att = doc["attestation"]
    if not isinstance(att, dict):
        raise _Fail("FormatInvalid", "WrongType")
    algorithm = _str(att, "algorithm", True)
    public_key = _str(att, "public_key", True)
    _str(att, "key_id", False)
    signature = _str(att, "signature", True)
    return {"algorithm": algorithm, "public_key": public_key, "signature": signature}


def _parse(doc: Any) -> dict:
    if not isinstance(doc, dict):
        raise _Fail("FormatInvalid", "NotAnObject")
    if "chain" not in doc and ("destruction" in doc or "document_hash" in doc or "verify" in doc):
        raise _Fail("FormatInvalid", "PresentationForm")
    version = _str(doc, "cdp_version", True)
    if version not in SUPPORTED_VERSIONS:
        raise _Fail("VersionUnsupported", "UnknownVersion")
    p: dict[str, Any] = {"version": version, "view_jcs": None, "activity_jcs": None, "activity_root": None,
                         "canonical_hash": None, "authority": None, "key_version": None}
    if version == "1.0" and "session_id" in doc and "capsule_id" not in doc:
        _str(doc, "session_id", True)
        p["destroyed_at"] = _str(doc, "destroyed_at", False)
        p["steps"] = _steps(doc, True)
        p["final_hash"] = _hash(doc, "final_hash", True, _is_legacy_hash)
        p["attestation"] = _attestation(doc)
        p.update(form="legacy", partial=False, destruction=None)
        return p
    v2 = version != "1.0"
    _str(doc, "capsule_id", True)
    _str(doc, "created_at", True)
    completeness = _str(doc, "completeness", False)
    if completeness is not None and completeness not in ("complete", "partial"):
        raise _Fail("FormatInvalid", "WrongType")
    partial = completeness == "partial"
    _str(doc, "reason", partial)
    steps = _steps(doc, False)
    needs_chain = (not v2) or (not partial) or len(steps) == STEP_COUNT
    p["destroyed_at"] = _str(doc, "destroyed_at", needs_chain)
    p["final_hash"] = _hash(doc, "final_hash", needs_chain, _is_sha512)
    if v2:
        p["activity_root"] = _hash(doc, "activity_root", False, _is_sha512)
        if "signing_authority_id" in doc or "signing_key_version" in doc:
            p["authority"] = _str(doc, "signing_authority_id", True)
            if "signing_key_version" not in doc:
                raise _Fail("FormatInvalid", "MissingField")
            kv = doc["signing_key_version"]
            if not _is_int(kv) or kv < 0:
                raise _Fail("FormatInvalid", "WrongType")
            p["key_version"] = int(kv)
    p["destruction"] = _destruction(doc.get("termination"))
    cp = doc.get("component_proofs")
    p["component_keys"] = set(cp.keys()) if v2 and isinstance(cp, dict) else None
    att = _attestation(doc)
    p["attestation"] = att
    if v2:
        p["canonical_hash"] = _hash(doc, "canonical_hash", att is not None, _is_sha512)
        if "activity" in doc:
            activity = doc["activity"]
            if not isinstance(activity, list):
                raise _Fail("FormatInvalid", "WrongType")
            try:
                p["activity_jcs"] = [serialize(e, 1) for e in activity]
            except (JcsError, RecursionError):
                raise _Fail("FormatInvalid", "WrongType")
        try:
            p["view_jcs"] = canonical_view_jcs(doc)
        except (JcsError, RecursionError):
            raise _Fail("FormatInvalid", "WrongType")
    p.update(form="capsule", partial=partial, steps=steps)
    return p


def _destruction(termination: Any) -> Optional[dict]:
    """The signed destruction statement inside `termination`: None when absent, WrongType when malformed."""
    if not isinstance(termination, dict):
        return None
    d = termination.get("destruction", _ABSENT)
    steps = termination.get("incomplete_steps", _ABSENT)
    if d is _ABSENT:
        if steps is _ABSENT:
            return None
        raise _Fail("FormatInvalid", "WrongType")
    if d == "complete" and isinstance(d, str):
        if steps is not _ABSENT:
            raise _Fail("FormatInvalid", "WrongType")
        return {"status": "complete"}
    if d != "incomplete" or not isinstance(steps, list) or not steps:
        raise _Fail("FormatInvalid", "WrongType")
    out = []
    for st in steps:
        if not isinstance(st, dict):
            raise _Fail("FormatInvalid", "WrongType")
        step, reason = st.get("step"), st.get("reason")
        if isinstance(step, bool) or not isinstance(step, (int, float)) or not _is_int(step) or not 1 <= step <= 8:
            raise _Fail("FormatInvalid", "WrongType")
        if not isinstance(reason, str):
            raise _Fail("FormatInvalid", "WrongType")
        out.append({"step": int(step) if float(step).is_integer() else step, "reason": reason})
    return {"status": "incomplete", "incomplete_steps": out}


_ABSENT = object()

NO_COMPONENT_PROOF = "no component proof: the step recorded no verifiable operation"
_COMPONENTS = {1: "namespace_verification", 2: "mountinfo_verification", 3: "memory_wipe",
               4: "key_destruction", 5: "credential_incineration", 6: "merkle_zero_state"}


def _against_component_proofs(d: dict, keys: Optional[set]) -> dict:
    """The statement read against the component proofs (docs/PROOF_FORMAT.md "Destruction status"):
    steps 1..6 without a component proof are reported incomplete; any disagreement is flagged."""
    by_step = {st["step"]: st["reason"] for st in d.get("incomplete_steps") or []}
    contradicted = False
    for step, name in _COMPONENTS.items():
        proven = keys is not None and name in keys
        if not proven and step not in by_step:
            by_step[step] = NO_COMPONENT_PROOF
            contradicted = True
        elif proven and step in by_step:
            contradicted = True
    if not contradicted:
        return d
    steps = [{"step": k, "reason": by_step[k]} for k in sorted(by_step)]
    return {"status": "incomplete", "incomplete_steps": steps, "contradicted": True}


# ---------------------------------------------------------------- stages 1-6

def _b64(text: str) -> Optional[bytes]:
    """Strict standard base64 with padding (unused bits zero), as the contract's encoders write it."""
    if len(text) % 4 != 0 or not _B64_RE.match(text):
        return None
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def _prefixed_b64(text: str) -> Optional[bytes]:
    return _b64(text[7:]) if text.startswith("base64:") else None


def _stages(p: dict, manifest: Optional[dict]) -> None:
    steps = p["steps"]
    n = len(steps)
    if not (n == STEP_COUNT or (n == 0 and p["partial"])):
        raise _Fail("StepCountInvalid", "NotEightSteps", 1)
    if n == STEP_COUNT:
        for i, (step, _, _) in enumerate(steps):
            if step != i + 1:
                raise _Fail("ChainMismatch", "StepOrder", 2)
        for i, (_, subsystem, _) in enumerate(steps):
            if subsystem != STEPS[i][1]:
                raise _Fail("ChainMismatch", "SubsystemMismatch", 2)
        if p["form"] == "capsule":
            for (_, _, got), want in zip(steps, chain_hashes(p["destroyed_at"])):
                if got[7:] != want:
                    raise _Fail("ChainMismatch", "ChainHashMismatch", 2)
        if p["final_hash"] != steps[-1][2]:
            raise _Fail("FinalHashMismatch", "DoesNotMatchStep8", 3)
    if p["view_jcs"] is not None:
        if p["canonical_hash"] is not None and p["canonical_hash"][7:] != sha512_hex(_utf8(p["view_jcs"])):
            raise _Fail("CanonicalHashMismatch", "DoesNotMatch", 4)
        if p["activity_jcs"] is not None:
            if p["activity_root"] is None or p["activity_root"][7:] != merkle_root_hex(p["activity_jcs"]):
                raise _Fail("ActivityMismatch", "RootMismatch", 4)
    att = p["attestation"]
    if att is None:
        raise _Fail("AttestationMissing", "Unsigned", 5)
    if att["algorithm"] != "Ed25519":
        raise _Fail("KeyInvalid", "UnsupportedAlgorithm", 5)
    public_key = _prefixed_b64(att["public_key"])
    if public_key is None or len(public_key) != 32:
        raise _Fail("KeyInvalid", "MalformedPublicKey", 5)
    signature = _prefixed_b64(att["signature"])
    if signature is None or len(signature) != 64:
        raise _Fail("SignatureMismatch", "MalformedSignature", 5)
    basis = p["final_hash"] if p["version"] == "1.0" else p["canonical_hash"]
    message = basis[basis.index(":") + 1:].encode("ascii")
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(signature, message)
    except (InvalidSignature, ValueError):
        raise _Fail("SignatureMismatch", "DoesNotVerify", 5)
    if manifest is not None and p["authority"] is not None:
        _resolve(manifest, p["authority"], p["key_version"], public_key)


def _resolve(manifest: Any, authority_id: str, version: int, public_key: bytes) -> None:
    authorities = manifest.get("authorities") if isinstance(manifest, dict) else None
    authorities = authorities if isinstance(authorities, list) else []
    authority = next(
        (a for a in authorities if isinstance(a, dict) and a.get("signing_authority_id") == authority_id), None
    )
    if authority is None:
        raise _Fail("KeyResolution", "UnknownAuthority", 6)
    keys = authority.get("keys") if isinstance(authority.get("keys"), list) else []
    entry = next(
        (k for k in keys if isinstance(k, dict) and _is_int(k.get("signing_key_version"))
         and k.get("signing_key_version") == version),
        None,
    )
    if entry is None:
        raise _Fail("KeyResolution", "UnknownKeyVersion", 6)
    listed = entry.get("public_key")
    raw = None
    if isinstance(listed, str):
        raw = _b64(listed[7:] if listed.startswith("base64:") else listed)
    if raw is None or raw != public_key:
        raise _Fail("KeyResolution", "KeyMismatch", 6)


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def verify_proof(document: Any, trust_manifest: Optional[dict] = None, now: Optional[Callable[[], str]] = None) -> dict:
    """Verifies a parsed proof document offline. Never raises."""
    verified_at = now() if now else _now()
    stage = 0
    try:
        p = _parse(document)
        stage = 1
        _stages(p, trust_manifest)
    except _Fail as f:
        return {"valid": False, "stage_reached": f.stage, "failure_reason": {"type": f.type, "reason": f.reason},
                "verified_at": verified_at}
    except Exception:  # a value no JSON parser produces: report the stage it interrupted
        if stage == 0:
            reason = {"type": "FormatInvalid", "reason": "WrongType"}
        else:
            stage, reason = 5, {"type": "SignatureMismatch", "reason": "DoesNotVerify"}
        return {"valid": False, "stage_reached": stage, "failure_reason": reason, "verified_at": verified_at}
    complete = len(p["steps"]) == STEP_COUNT
    checks: dict[str, Any] = {
        "cdp_version_valid": True,
        # The legacy form's chain is taken from the document: its integrity was not checked.
        "chain_integrity": complete and p["form"] != "legacy",
        "final_hash_valid": complete,
        "step_count": len(p["steps"]),
        "signature_valid": True,
        "algorithm": "Ed25519",
    }
    if p["form"] == "legacy":
        checks["chain_recomputed"] = False
    result: dict[str, Any] = {"valid": True, "checks": checks}
    if p["partial"]:
        result["completeness"] = "partial"
    if p["form"] == "legacy":
        result["scope"] = "reduced"
    if p["destruction"] is not None:
        d = p["destruction"]
        if len(p["steps"]) == STEP_COUNT and p["version"] != "1.0":
            d = _against_component_proofs(d, p.get("component_keys"))
        result["destruction"] = d
    result["verified_at"] = verified_at
    return result


def verify_proof_json(text: str | bytes, trust_manifest: Optional[dict] = None) -> dict:
    """Parses JSON text (no NaN or Infinity, which JSON does not have) and verifies it."""
    def refuse(c: str) -> Any:
        raise ValueError(c)

    try:
        doc = json.loads(text, parse_constant=refuse)
    except (ValueError, RecursionError):
        return {"valid": False, "stage_reached": 0, "failure_reason": {"type": "FormatInvalid", "reason": "NotAnObject"},
                "verified_at": _now()}
    return verify_proof(doc, trust_manifest)


def verdict_line(result: dict, document: Any = None) -> str:
    """The one-line verdict, worded as every verifier of the service words it:
    "AuditProof verified", never "destruction verified"; reduced scope, partial
    proofs and a destruction the signed document reports as incomplete are stated.
    The result carries all it needs; `document` is accepted and not read."""
    if not result.get("valid"):
        fr = result.get("failure_reason") or {}
        return f"AuditProof NOT verified: stage {result.get('stage_reached')} failed: {fr.get('type')}/{fr.get('reason')}"
    parts = ["AuditProof verified"]
    if result.get("scope") == "reduced":
        parts[0] += " at reduced scope"
    if result.get("completeness") == "partial":
        parts.append("partial proof: integrity of the document only")
    d = result.get("destruction")
    if isinstance(d, dict) and d.get("status") == "incomplete":
        steps = "; ".join(f"step {st['step']}: {st['reason']}" for st in d.get("incomplete_steps") or [])
        parts.append(f"destruction reported incomplete ({steps})")
        if d.get("contradicted"):
            parts.append("its destruction statement disagrees with its component proofs")
    if (result.get("checks") or {}).get("chain_recomputed") is False:
        parts.append("legacy session form: chain hashes taken from the document, not recomputed")
    return "; ".join(parts)
