"""Client and AsyncClient against a live capsule serve: endpoints, errors,
retries through a proxy that fails N times, time-outs, a 10,000-record batch
and a 3-step session chain whose proofs link."""
import asyncio
import hashlib
import http.server
import json
import threading
import time
import uuid

import httpx
import pytest

import capsule_sdk as cs
from capsule_sdk import AsyncClient, Client, verdict_line, verify_proof


def sha512(b: bytes) -> str:
    return "sha512:" + hashlib.sha512(b).hexdigest()


@pytest.fixture(scope="module")
def key(live):
    url, _ = live
    r = httpx.post(f"{url}/v1/signup", json={"email": f"py{uuid.uuid4().hex[:10]}@example.com", "jurisdiction": "EU"})
    assert r.status_code == 201
    return r.json()["api_key"]


@pytest.fixture
def client(live, key):
    with Client(live[0], key, trace_id="trace-py") as c:
        yield c


class Faulty:
    """A proxy that answers the first `fail` requests matching `match` itself."""

    def __init__(self, target, match, fail, answer):
        self.seen = []
        failed = [0]
        outer = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _any(self):
                n = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(n) if n else b""
                hit = match(self.command, self.path)
                if hit:
                    outer.seen.append((self.headers.get("idempotency-key"), time.monotonic()))
                if hit and failed[0] < fail:
                    failed[0] += 1
                    if answer == "drop":
                        self.close_connection = True
                        self.connection.shutdown(2)
                        return
                    if answer == "slow":
                        time.sleep(3)
                        return
                    status = int(answer)
                    code = {429: "rate_limited", 503: "service_unavailable"}.get(status, "internal_error")
                    err = {"code": code, "type": "x", "message": "injected", "request_id": f"req_fault{failed[0]}"}
                    if status == 429:
                        err["retry_after"] = 1
                    data = json.dumps({"error": err}).encode()
                    self.send_response(status)
                    self.send_header("content-type", "application/json")
                    self.send_header("content-length", str(len(data)))
                    if status == 429:
                        self.send_header("retry-after", "1")
                    self.end_headers()
                    self.wfile.write(data)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                r = httpx.request(self.command, target + self.path, headers=headers, content=body, timeout=60)
                self.send_response(r.status_code)
                for k, v in r.headers.items():
                    if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding"):
                        self.send_header(k, v)
                self.send_header("content-length", str(len(r.content)))
                self.end_headers()
                self.wfile.write(r.content)

            do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _any

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def test_capsule_lifecycle_and_offline_online_agreement(client):
    assert client.health()["status"] == "healthy"
    assert client.ready()["status"] == "ready"
    assert client.me()["customer_id"].startswith("cus_")
    assert client.openapi()["openapi"] == "3.1.0"
    c = client.create_capsule(ttl=120, data_classification="PHI", metadata={"case": "py"})
    assert client.get_capsule(c["id"])["metadata"] == {"case": "py"}
    up = client.upload(c["id"], "in.txt", b"hello\n")
    assert up["sha512"] == sha512(b"hello\n")
    ex = client.exec(c["id"], "tr a-z A-Z < /data/input/in.txt > /data/output/out.txt")
    assert ex["exit_code"] == 0, ex["stderr"]
    assert [f["filename"] for f in client.list_output(c["id"])["files"]] == ["out.txt"]
    assert client.download(c["id"], "out.txt") == b"HELLO\n"
    d = client.destroy(c["id"])
    offline = verify_proof(d["audit_proof"])
    online = client.verify_online(d["audit_proof"])
    assert offline["valid"] is True and online["valid"] is True
    assert offline["checks"] == online["checks"]
    assert verdict_line(offline, d["audit_proof"]) == "AuditProof verified"
    record = client.record(c["id"])
    assert verify_proof(record)["valid"] is True
    pub = client.public_proof(c["id"])
    assert verify_proof(pub)["valid"] is True
    tampered = {**pub, "capsule_context": {**pub["capsule_context"], "jurisdiction": "US"}}
    bad, bad_online = verify_proof(tampered), client.verify_online(tampered)
    assert bad["failure_reason"] == bad_online["failure_reason"] == {"type": "CanonicalHashMismatch", "reason": "DoesNotMatch"}
    assert bad["stage_reached"] == bad_online["stage_reached"] == 4
    k = client.key(pub["attestation"]["key_id"])
    assert "base64:" + k["public_key"] == pub["attestation"]["public_key"]
    assert client.proof(c["id"])["proof_id"].startswith("prf_")


def test_lists_capsulefiles_sessions_usage(live):
    url, _ = live
    key2 = httpx.post(f"{url}/v1/signup", json={"email": f"py{uuid.uuid4().hex[:10]}@example.com", "jurisdiction": "US"}).json()["api_key"]
    with Client(url, key2) as c:
        ids = [c.create_capsule(ttl=60)["id"] for _ in range(3)]
        assert sorted(x["id"] for x in c.list_capsules(limit=1)) == sorted(ids)
        for i in ids:
            c.destroy(i)
        assert len(list(c.list_api_keys(limit=1))) == 1
        assert len(list(c.usage_items(limit=2))) >= 3
        assert c.usage_items_csv().startswith("id,") or "\r\n" in c.usage_items_csv()
        assert c.usage_summary()["tier"] == "free"
        assert c.usage_estimate()["tier"] == "free"
        assert c.mfa_status()["status"] == "none"
        cf = c.create_capsulefile(name="py-cf", runtime="python3.11", entrypoint="python3 main.py")
        c.add_capsulefile_file(cf["id"], "main.py", 'print("entry")\n')
        assert c.update_capsulefile(cf["id"], default_ttl=90)["default_ttl"] == 90
        assert c.finalize_capsulefile(cf["id"])["content_hash"].startswith("sha512:")
        assert "py-cf" in [x["name"] for x in c.list_capsulefiles()]
        pinned = c.create_capsule(capsulefile_id=cf["id"])
        assert c.exec(pinned["id"])["stdout"] == "entry\n"
        c.destroy(pinned["id"])
        s = c.create_session()
        assert c.get_session(s["session_id"])["status"] == "active"
        assert c.session_exec(s["session_id"], "cat /data/input/data", input_data="x")["output"] == "x"
        sd = c.destroy_session(s["session_id"])
        legacy = verify_proof(sd["cdp"])
        assert legacy["valid"] and legacy["checks"]["chain_recomputed"] is False
        assert "reduced scope" in verdict_line(legacy, sd["cdp"])


def test_error_classes(client, live):
    with pytest.raises(cs.ResourceNotFoundError) as e:
        client.get_capsule("cap_0000")
    assert e.value.status == 404 and e.value.request_id.startswith("req_")
    with pytest.raises(cs.InvalidParametersError) as e:
        client.create_capsule(ttl=-1)
    assert e.value.field == "ttl"
    with pytest.raises(cs.InvalidApiKeyError):
        Client(live[0], "sk_live_nope").me()
    with pytest.raises(cs.TierRequiredError) as e:
        client.create_egress_profile(name="p")
    assert e.value.attempts == 1
    assert all(issubclass(c, cs.CapsuleError) for c in cs.ERROR_CLASSES.values())
    assert len(cs.ERROR_CLASSES) == 15


def test_retries_jitter_and_idempotency_key(live, key):
    url, _ = live
    p = Faulty(url, lambda m, path: m == "POST" and path == "/v1/capsules", 3, "503")
    waits = []
    try:
        with Client(p.url, key, backoff_base=0.1, sleep=waits.append) as c:
            made = c.create_capsule(ttl=60)
        assert len(p.seen) == 4
        assert len({k for k, _ in p.seen}) == 1 and p.seen[0][0]
        assert len(waits) == 3
        for n, w in enumerate(waits):
            assert 0 <= w < min(30, 0.1 * 2**n)
    finally:
        p.close()
    with Client(url, key) as c:
        c.destroy(made["id"])
    p = Faulty(url, lambda m, path: m == "POST" and path == "/v1/capsules", 100, "500")
    try:
        waits = []
        with Client(p.url, key, sleep=waits.append) as c, pytest.raises(cs.InternalError) as e:
            c.create_capsule()
        assert e.value.attempts == 5 and len(p.seen) == 5 and len({k for k, _ in p.seen}) == 1
        assert all(w < min(30, 0.5 * 2**n) for n, w in enumerate(waits))
    finally:
        p.close()
    p = Faulty(url, lambda m, path: path == "/v1/customers/me", 1, "429")
    try:
        with Client(p.url, key) as c:
            c.me()
        assert len(p.seen) == 2 and p.seen[1][1] - p.seen[0][1] >= 0.95
    finally:
        p.close()
    p = Faulty(url, lambda m, path: path == "/v1/customers/me", 100, "429")
    try:
        with Client(p.url, key, max_retries=1, sleep=lambda s: None) as c, pytest.raises(cs.RateLimitedError) as e:
            c.me()
        assert e.value.retry_after == 1 and e.value.request_id == "req_fault2"
    finally:
        p.close()
    with Client(url, key) as c:
        live_c = c.create_capsule(ttl=60)
    p = Faulty(url, lambda m, path: path.endswith("/exec"), 1, "500")
    try:
        with Client(p.url, key, sleep=lambda s: None) as c, pytest.raises(cs.InternalError):
            c.exec(live_c["id"], "true")
        assert len(p.seen) == 1, "a 500 on exec is not retried"
    finally:
        p.close()
    p = Faulty(url, lambda m, path: path.endswith("/exec"), 2, "503")
    try:
        with Client(p.url, key, sleep=lambda s: None) as c:
            assert c.exec(live_c["id"], "echo 6")["stdout"] == "6\n"
        assert len(p.seen) == 3, "a 503 on exec is retried"
    finally:
        p.close()
    with Client(url, key) as c:
        c.destroy(live_c["id"])
    with Client("http://127.0.0.1:1", key, max_retries=2, sleep=lambda s: None) as c, pytest.raises(cs.NetworkError) as e:
        c.me()
    assert e.value.attempts == 3


def test_timeouts(live, key):
    p = Faulty(live[0], lambda m, path: path == "/v1/customers/me", 100, "slow")
    try:
        with Client(p.url, key, max_retries=1, sleep=lambda s: None, timeouts={"default": 0.3}) as c:
            t0 = time.monotonic()
            with pytest.raises(cs.TimeoutError) as e:
                c.me()
            assert e.value.attempts == 2 and time.monotonic() - t0 < 3
            with pytest.raises(cs.TimeoutError):
                c.me(timeout=0.1)
            assert c.timeouts == {"create": 30.0, "exec": 120.0, "verify": 60.0, "default": 0.3}
    finally:
        p.close()


BATCH_MAIN = """import json
out = open('/data/output/results.jsonl', 'w')
for line in open('/data/input/records.jsonl'):
    r = json.loads(line)
    if r['n'] % 1000 == 7:
        out.write(json.dumps({'custom_id': r['custom_id'], 'status': 'errored', 'output': None, 'error_code': 'odd', 'error_message': 'n%1000==7'}) + '\\n')
    else:
        out.write(json.dumps({'custom_id': r['custom_id'], 'status': 'succeeded', 'output': r['n'] * 2, 'error_code': None, 'error_message': None}) + '\\n')
"""


def test_batch_of_10000_records(client):
    cf = client.create_capsulefile(name="py-batch", runtime="python3.11", entrypoint="python3 main.py")
    client.add_capsulefile_file(cf["id"], "main.py", BATCH_MAIN)
    client.finalize_capsulefile(cf["id"])
    records = [{"custom_id": f"r{i}", "n": i} for i in range(10_000)]
    r = cs.run_batch(client, records, capsulefile_id=cf["id"])
    assert [x["custom_id"] for x in r["results"]] == [x["custom_id"] for x in records]
    assert sum(x["status"] == "errored" for x in r["results"]) == 10
    assert r["results"][7] == {"custom_id": "r7", "status": "errored", "output": None, "error_code": "odd", "error_message": "n%1000==7"}
    assert r["results"][9999]["output"] == 19998
    assert r["verification"]["valid"] is True


STEP = "python3 -c \"import os;p='/data/input/state.bin';n=int(open(p).read()) if os.path.exists(p) else 0;open('/data/output/state.bin','w').write(str(n+1));print(n+1)\""


def test_session_chain_links(client):
    steps = cs.run_session(client, [STEP, STEP, STEP])
    assert [s["exec"]["stdout"] for s in steps] == ["1\n", "2\n", "3\n"]
    assert steps[0]["parent_proof_id"] is None
    assert steps[1]["parent_proof_id"] == steps[0]["proof_id"]
    assert steps[2]["parent_proof_id"] == steps[1]["proof_id"]
    for s in steps:
        assert s["verification"]["valid"] is True
        assert client.get_capsule(s["capsule_id"])["metadata"].get(cs.PARENT_PROOF_KEY) == s["parent_proof_id"]
    for a, b in zip(steps, steps[1:]):
        out = next(e for e in client.public_proof(a["capsule_id"])["activity"] if e["type"] == "FileDownloaded")
        into = next(e for e in client.public_proof(b["capsule_id"])["activity"] if e["type"] == "FileUploaded")
        assert out["sha512"] == into["sha512"]


def test_async_client(live, key):
    async def main():
        async with AsyncClient(live[0], key) as c:
            assert (await c.health())["status"] == "healthy"
            cap = await c.create_capsule(ttl=60)
            await c.upload(cap["id"], "a.txt", "abc")
            assert (await c.exec(cap["id"], "cat /data/input/a.txt > /data/output/b.txt"))["exit_code"] == 0
            assert await c.download(cap["id"], "b.txt") == b"abc"
            d = await c.destroy(cap["id"])
            assert verify_proof(d["audit_proof"])["valid"] is True
            assert cap["id"] in [x["id"] async for x in c.list_capsules(limit=2)]
            with pytest.raises(cs.ResourceNotFoundError):
                await c.get_capsule("cap_0000")
            steps = await cs.arun_session(c, [STEP, STEP])
            assert [s["exec"]["stdout"] for s in steps] == ["1\n", "2\n"]
            assert steps[1]["parent_proof_id"] == steps[0]["proof_id"]

    asyncio.run(main())
