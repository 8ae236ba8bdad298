"""Client and AsyncClient: every endpoint of the Capsule API over httpx.

Retries network errors, 429 and 5xx with exponential backoff and full jitter
(default 4 retries, 30 s cap), honouring Retry-After. The POSTs the service
replays by Idempotency-Key get one key per logical call, reused across its
retries; other POSTs (exec, upload) are retried only on 429 and 503, which say
the request did not run.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import random as _random
import time
import uuid
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable, Iterator, Optional, Union
from urllib.parse import quote

import httpx

from .errors import CapsuleError, DigestMismatchError, NetworkError, TimeoutError, error_for

DEFAULT_TIMEOUTS = {"create": 30.0, "exec": 120.0, "verify": 60.0, "default": 30.0}


@dataclass
class _Req:
    method: str
    path: str
    query: Optional[dict[str, Any]] = None
    json: Any = None
    content: Optional[bytes] = None
    idempotent: bool = False
    timeout: str = "default"
    raw: bool = False


def _enc(s: str) -> str:
    return quote(s, safe="")


def _retry_after(h: httpx.Headers) -> Optional[int]:
    v = h.get("retry-after")
    return int(v) if v is not None and v.strip().isdigit() else None


class _Base:
    def __init__(
        self,
        base_url: Optional[str] = None,
        api_key: Optional[str] = None,
        *,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_cap: float = 30.0,
        timeouts: Optional[dict[str, float]] = None,
        trace_id: Optional[str] = None,
        random: Callable[[], float] = _random.random,
        new_idempotency_key: Callable[[], str] = lambda: str(uuid.uuid4()),
        transport: Optional[httpx.BaseTransport | httpx.AsyncBaseTransport] = None,
    ):
        base = base_url or os.environ.get("CAPSULE_BASE_URL")
        if not base:
            raise ValueError("base_url (or CAPSULE_BASE_URL) is required")
        self.base_url = base.rstrip("/")
        self._api_key = api_key or os.environ.get("CAPSULE_API_KEY")
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.timeouts = {**DEFAULT_TIMEOUTS, **(timeouts or {})}
        self.trace_id = trace_id
        self._random = random
        self._new_key = new_idempotency_key
        self._transport = transport

    def backoff(self, n: int) -> float:
        """Full jitter for retry n (0-based): uniform in [0, min(cap, base * 2^n))."""
        return self._random() * min(self.backoff_cap, self.backoff_base * 2**n)

    def _prepare(self, r: _Req, trace_id: Optional[str], idempotency_key: Optional[str]) -> dict[str, Any]:
        headers = {"accept": "application/json"}
        if self._api_key:
            headers["authorization"] = f"Bearer {self._api_key}"
        if trace_id or self.trace_id:
            headers["x-svc-trace-id"] = trace_id or self.trace_id  # type: ignore[assignment]
        if r.idempotent:
            headers["idempotency-key"] = idempotency_key or self._new_key()
        kw: dict[str, Any] = {"headers": headers}
        if r.json is not None:
            kw["content"] = json.dumps(r.json).encode()
            headers["content-type"] = "application/json"
        elif r.content is not None:
            kw["content"] = r.content
            headers["content-type"] = "application/octet-stream"
        q = {k: str(v) for k, v in (r.query or {}).items() if v is not None and v != ""}
        if q:
            kw["params"] = q
        return kw

    def _outcome(self, r: _Req, res: Optional[httpx.Response], exc: Optional[Exception], timeout: float):
        """(result, error, retryable) of one attempt."""
        replayable = r.method != "POST" or r.idempotent
        if exc is not None:
            if isinstance(exc, httpx.TimeoutException):
                return None, TimeoutError(0, {"code": "timeout", "message": f"no answer within {timeout} s"}), replayable
            return None, NetworkError(0, {"code": "network_error", "message": str(exc)}), replayable
        assert res is not None
        if res.status_code < 400:
            return res, None, False
        try:
            body = res.json().get("error")
            if not isinstance(body, dict):
                raise ValueError
        except Exception:
            body = {"message": f"HTTP {res.status_code}"}
        err = error_for(res.status_code, body, _retry_after(res.headers))
        s = res.status_code
        return None, err, s in (429, 503) or (s >= 500 and replayable)

    def _wait(self, err: CapsuleError, attempt: int) -> float:
        return min(self.backoff_cap, err.retry_after) if err.retry_after is not None else self.backoff(attempt)

    @staticmethod
    def _decode(res: httpx.Response, r: _Req) -> Any:
        if r.raw:
            return res
        if res.status_code == 204 or not res.content:
            return None
        return res.json()

    @staticmethod
    def _check_digest(res: httpx.Response, filename: str) -> bytes:
        expected = res.headers.get("x-svc-file-sha512")
        actual = "sha512:" + hashlib.sha512(res.content).hexdigest()
        if expected != actual:
            raise DigestMismatchError(res.status_code, {
                "code": "digest_mismatch",
                "message": f"{filename}: SHA-512 {actual} differs from X-Svc-File-Sha512 {expected}",
                "request_id": res.headers.get("x-svc-request-id"),
            })
        return res.content


def _endpoints(cls):
    """Adds every endpoint to a client class whose _call(req, **call) runs one logical call."""
    E = _Req

    def add(name, build, post=None):
        def method(self, *args, trace_id=None, timeout=None, idempotency_key=None, **kwargs):
            return self._call(build(*args, **kwargs), post, trace_id=trace_id, timeout=timeout,
                              idempotency_key=idempotency_key)
        method.__name__ = name
        setattr(cls, name, method)

    add("signup", lambda email, jurisdiction: E("POST", "/v1/signup", json={"email": email, "jurisdiction": jurisdiction}))
    add("contact", lambda body: E("POST", "/v1/contact", json=body))
    add("health", lambda: E("GET", "/v1/health"))
    add("ready", lambda: E("GET", "/v1/health/ready"))
    add("openapi", lambda: E("GET", "/v1/openapi.json"))
    add("verify_online", lambda cdp: E("POST", "/v1/verify", json={"cdp": cdp}, timeout="verify"))
    add("public_proof", lambda capsule_id, presentation=False: E(
        "GET", f"/v1/capsules/{_enc(capsule_id)}/cdp/verify", query={"format": "presentation" if presentation else None}))
    add("key", lambda key_id: E("GET", f"/v1/keys/{_enc(key_id)}"))
    add("error_doc", lambda code: E("GET", f"/docs/errors/{_enc(code)}"))
    add("create_capsule", lambda **body: E("POST", "/v1/capsules", json=body, idempotent=True, timeout="create"))
    add("get_capsule", lambda id: E("GET", f"/v1/capsules/{_enc(id)}"))
    add("exec", lambda id, command=None, **body: E(
        "POST", f"/v1/capsules/{_enc(id)}/exec", json={**({"command": command} if command is not None else {}), **body},
        timeout="exec"))
    add("upload", lambda id, filename, data: E(
        "POST", f"/v1/capsules/{_enc(id)}/upload", query={"filename": filename},
        content=data.encode() if isinstance(data, str) else bytes(data)))
    add("list_output", lambda id: E("GET", f"/v1/capsules/{_enc(id)}/output"))
    add("download", lambda id, filename: E("GET", f"/v1/capsules/{_enc(id)}/output/{_enc(filename)}", raw=True),
        post=lambda res, req: _Base._check_digest(res, req.path.rsplit("/", 1)[-1]))
    add("destroy", lambda id: E("DELETE", f"/v1/capsules/{_enc(id)}"))
    add("record", lambda id: E("GET", f"/v1/capsules/{_enc(id)}/cdp"))
    add("proof", lambda capsule_id: E("GET", f"/v1/proofs/{_enc(capsule_id)}"))
    add("me", lambda: E("GET", "/v1/customers/me"))
    add("create_capsulefile", lambda **body: E("POST", "/v1/capsulefiles", json=body, idempotent=True))
    add("get_capsulefile", lambda id: E("GET", f"/v1/capsulefiles/{_enc(id)}"))
    add("update_capsulefile", lambda id, **patch: E("PATCH", f"/v1/capsulefiles/{_enc(id)}", json=patch))
    add("add_capsulefile_file", lambda id, filename, data: E(
        "POST", f"/v1/capsulefiles/{_enc(id)}/files", query={"filename": filename},
        content=data.encode() if isinstance(data, str) else bytes(data)))
    add("finalize_capsulefile", lambda id: E("POST", f"/v1/capsulefiles/{_enc(id)}/finalize", idempotent=True))
    add("delete_capsulefile", lambda id: E("DELETE", f"/v1/capsulefiles/{_enc(id)}"))
    add("create_session", lambda **body: E("POST", "/v1/sessions", json=body, timeout="create"))
    add("get_session", lambda id: E("GET", f"/v1/sessions/{_enc(id)}"))
    add("session_exec", lambda id, command, **body: E(
        "POST", f"/v1/sessions/{_enc(id)}/exec", json={"command": command, **body}, timeout="exec"))
    add("destroy_session", lambda id: E("DELETE", f"/v1/sessions/{_enc(id)}"))
    add("create_egress_profile", lambda **body: E("POST", "/v1/egress/profiles", json=body, idempotent=True))
    add("get_egress_profile", lambda id: E("GET", f"/v1/egress/profiles/{_enc(id)}"))
    add("update_egress_profile", lambda id, **body: E("PUT", f"/v1/egress/profiles/{_enc(id)}", json=body))
    add("delete_egress_profile", lambda id: E("DELETE", f"/v1/egress/profiles/{_enc(id)}"))
    add("add_egress_rule", lambda profile_id, **body: E(
        "POST", f"/v1/egress/profiles/{_enc(profile_id)}/rules", json=body, idempotent=True))
    add("delete_egress_rule", lambda profile_id, rule_id: E(
        "DELETE", f"/v1/egress/profiles/{_enc(profile_id)}/rules/{_enc(rule_id)}"))
    add("add_default_egress_rule", lambda **body: E("POST", "/v1/egress", json=body, idempotent=True))
    add("delete_any_egress_rule", lambda rule_id: E("DELETE", f"/v1/egress/{_enc(rule_id)}"))
    add("create_api_key", lambda **body: E("POST", "/v1/api-keys", json=body))
    add("revoke_api_key", lambda id: E("DELETE", f"/v1/api-keys/{_enc(id)}"))
    add("rotate_api_key", lambda id, **body: E("POST", f"/v1/api-keys/{_enc(id)}/rotate", json=body))
    add("mfa_status", lambda: E("GET", "/v1/mfa"))
    add("mfa_enroll", lambda: E("POST", "/v1/mfa/enroll", json={}))
    add("mfa_activate", lambda code: E("POST", "/v1/mfa/activate", json={"code": code}))
    add("mfa_verify", lambda code: E("POST", "/v1/mfa/verify", json={"code": code}))
    add("mfa_remove", lambda: E("DELETE", "/v1/mfa"))
    add("usage_summary", lambda: E("GET", "/v1/usage/summary"))
    add("usage_estimate", lambda: E("GET", "/v1/usage/estimate"))
    add("usage_items_csv", lambda frm=None, to=None: E("GET", "/v1/usage/items.csv", query={"from": frm, "to": to}, raw=True),
        post=lambda res, req: res.text)
    add("checkout", lambda tier: E("POST", "/v1/billing/checkout", json={"tier": tier}, idempotent=True))

    lists = {
        "list_capsules": lambda: "/v1/capsules",
        "list_capsulefiles": lambda: "/v1/capsulefiles",
        "list_egress_profiles": lambda: "/v1/egress/profiles",
        "list_egress_rules": lambda profile_id: f"/v1/egress/profiles/{_enc(profile_id)}/rules",
        "list_all_egress_rules": lambda: "/v1/egress",
        "list_api_keys": lambda: "/v1/api-keys",
        "usage_items": lambda: "/v1/usage/items",
    }
    for name, path in lists.items():
        def lister(self, *args, limit=None, _path=path, **query):
            return self._pages(_path(*args), {"limit": limit, **query})
        lister.__name__ = name
        setattr(cls, name, lister)
    return cls


@_endpoints
class Client(_Base):
    """Synchronous client. Use as a context manager or call close()."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 sleep: Callable[[float], None] = time.sleep, **kw: Any):
        super().__init__(base_url, api_key, **kw)
        self._sleep = sleep
        self._http = httpx.Client(base_url=self.base_url, transport=self._transport)  # type: ignore[arg-type]

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _call(self, r: _Req, post=None, *, trace_id=None, timeout=None, idempotency_key=None) -> Any:
        kw = self._prepare(r, trace_id, idempotency_key)
        t = timeout if timeout is not None else self.timeouts[r.timeout]
        attempt = 0
        while True:
            res, exc = None, None
            try:
                res = self._http.request(r.method, r.path, timeout=t, **kw)
            except httpx.TransportError as e:
                exc = e
            ok, err, retryable = self._outcome(r, res, exc, t)
            if err is None:
                return post(ok, r) if post else self._decode(ok, r)
            err.attempts = attempt + 1
            if not retryable or attempt >= self.max_retries:
                raise err
            self._sleep(self._wait(err, attempt))
            attempt += 1

    def _pages(self, path: str, query: dict[str, Any]) -> Iterator[dict]:
        cursor = None
        while True:
            page = self._call(_Req("GET", path, query={**query, "cursor": cursor}))
            yield from page["items"]
            cursor = page.get("next_cursor")
            if not cursor:
                return


@_endpoints
class AsyncClient(_Base):
    """asyncio client: every method is a coroutine; lists are async iterators."""

    def __init__(self, base_url: Optional[str] = None, api_key: Optional[str] = None, *,
                 sleep: Callable[[float], Any] = asyncio.sleep, **kw: Any):
        super().__init__(base_url, api_key, **kw)
        self._sleep = sleep
        self._http = httpx.AsyncClient(base_url=self.base_url, transport=self._transport)  # type: ignore[arg-type]

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _call(self, r: _Req, post=None, *, trace_id=None, timeout=None, idempotency_key=None) -> Any:
        kw = self._prepare(r, trace_id, idempotency_key)
        t = timeout if timeout is not None else self.timeouts[r.timeout]
        attempt = 0
        while True:
            res, exc = None, None
            try:
                res = await self._http.request(r.method, r.path, timeout=t, **kw)
            except httpx.TransportError as e:
                exc = e
            ok, err, retryable = self._outcome(r, res, exc, t)
            if err is None:
                return post(ok, r) if post else self._decode(ok, r)
            err.attempts = attempt + 1
            if not retryable or attempt >= self.max_retries:
                raise err
            await self._sleep(self._wait(err, attempt))
            attempt += 1

    async def _pages(self, path: str, query: dict[str, Any]) -> AsyncIterator[dict]:
        cursor = None
        while True:
            page = await self._call(_Req("GET", path, query={**query, "cursor": cursor}))
            for item in page["items"]:
                yield item
            cursor = page.get("next_cursor")
            if not cursor:
                return


Bytes = Union[bytes, bytearray, str]
