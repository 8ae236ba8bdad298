"""The batch and session conventions: files at fixed paths, one capsule per
run, destroyed at the end and its AuditProof verified offline."""

from __future__ import annotations

import json
from typing import Any, Optional

from .verify import verify_proof

RECORDS_FILE = "records.jsonl"  # /data/input/records.jsonl
RESULTS_FILE = "results.jsonl"  # /data/output/results.jsonl
STATE_FILE = "state.bin"  # /data/input/state.bin -> /data/output/state.bin
PARENT_PROOF_KEY = "parent_proof_id"


def _records_body(records: list[dict]) -> bytes:
    seen = set()
    for r in records:
        cid = r.get("custom_id")
        if not isinstance(cid, str) or not cid:
            raise ValueError("every record needs a custom_id")
        if cid in seen:
            raise ValueError(f"custom_id {cid} is not unique")
        seen.add(cid)
    return ("\n".join(json.dumps(r, ensure_ascii=False) for r in records) + "\n").encode()


def _results(data: bytes) -> list[dict]:
    out = []
    for line in data.decode().splitlines():
        if not line.strip():
            continue
        r = json.loads(line)
        out.append({
            "custom_id": str(r.get("custom_id")),
            "status": "succeeded" if r.get("status") == "succeeded" else "errored",
            "output": r.get("output"),
            "error_code": r.get("error_code"),
            "error_message": r.get("error_message"),
        })
    return out


def run_batch(client, records: list[dict], *, capsulefile_id: Optional[str] = None,
              command: Optional[str] = None, **create: Any) -> dict:
    """Runs records through one capsule; returns results, exec, destroy answer and offline verification."""
    if not capsulefile_id and not command:
        raise ValueError("give capsulefile_id or command")
    body = _records_body(records)
    c = client.create_capsule(**create, **({"capsulefile_id": capsulefile_id} if capsulefile_id else {}))
    try:
        client.upload(c["id"], RECORDS_FILE, body)
        ex = client.exec(c["id"], command) if command else client.exec(c["id"])
        if ex["exit_code"] != 0:
            raise RuntimeError(f"batch command exited {ex['exit_code']}: {ex['stderr'][:500]}")
        results = _results(client.download(c["id"], RESULTS_FILE))
    except BaseException:
        try:
            client.destroy(c["id"])
        finally:
            raise
    d = client.destroy(c["id"])
    return {"capsule_id": c["id"], "results": results, "exec": ex, "destroyed": d,
            "verification": verify_proof(d["audit_proof"])}


def run_session_step(client, command: str, *, state: Optional[bytes] = None,
                     parent_proof_id: Optional[str] = None, **create: Any) -> dict:
    """One step: state.bin in, command, state.bin out, destroy, proof; linked to its parent proof."""
    metadata = {**create.pop("metadata", {}), **({PARENT_PROOF_KEY: parent_proof_id} if parent_proof_id else {})}
    c = client.create_capsule(**create, metadata=metadata)
    try:
        if state is not None:
            client.upload(c["id"], STATE_FILE, state)
        ex = client.exec(c["id"], command)
        names = [f["filename"] for f in client.list_output(c["id"])["files"]]
        new_state = client.download(c["id"], STATE_FILE) if STATE_FILE in names else None
    except BaseException:
        try:
            client.destroy(c["id"])
        finally:
            raise
    d = client.destroy(c["id"])
    return {"capsule_id": c["id"], "exec": ex, "state": new_state, "destroyed": d,
            "proof_id": client.proof(c["id"])["proof_id"], "parent_proof_id": parent_proof_id,
            "verification": verify_proof(d["audit_proof"])}


def run_session(client, commands: list[str], *, state: Optional[bytes] = None, **create: Any) -> list[dict]:
    steps, parent = [], None
    for cmd in commands:
        s = run_session_step(client, cmd, state=state, parent_proof_id=parent, **create)
        steps.append(s)
        state, parent = s["state"], s["proof_id"]
    return steps


async def arun_batch(client, records: list[dict], *, capsulefile_id: Optional[str] = None,
                     command: Optional[str] = None, **create: Any) -> dict:
    if not capsulefile_id and not command:
        raise ValueError("give capsulefile_id or command")
    body = _records_body(records)
    c = await client.create_capsule(**create, **({"capsulefile_id": capsulefile_id} if capsulefile_id else {}))
    try:
        await client.upload(c["id"], RECORDS_FILE, body)
        ex = await (client.exec(c["id"], command) if command else client.exec(c["id"]))
        if ex["exit_code"] != 0:
            raise RuntimeError(f"batch command exited {ex['exit_code']}: {ex['stderr'][:500]}")
        results = _results(await client.download(c["id"], RESULTS_FILE))
    except BaseException:
        try:
            await client.destroy(c["id"])
        finally:
            raise
    d = await client.destroy(c["id"])
    return {"capsule_id": c["id"], "results": results, "exec": ex, "destroyed": d,
            "verification": verify_proof(d["audit_proof"])}


async def arun_session(client, commands: list[str], *, state: Optional[bytes] = None, **create: Any) -> list[dict]:
    steps, parent = [], None
    for cmd in commands:
        metadata = {**create.get("metadata", {}), **({PARENT_PROOF_KEY: parent} if parent else {})}
        c = await client.create_capsule(**{**create, "metadata": metadata})
        if state is not None:
            await client.upload(c["id"], STATE_FILE, state)
        ex = await client.exec(c["id"], cmd)
        names = [f["filename"] for f in (await client.list_output(c["id"]))["files"]]
        new_state = await client.download(c["id"], STATE_FILE) if STATE_FILE in names else None
        d = await client.destroy(c["id"])
        proof_id = (await client.proof(c["id"]))["proof_id"]
        steps.append({"capsule_id": c["id"], "exec": ex, "state": new_state, "destroyed": d, "proof_id": proof_id,
                      "parent_proof_id": parent, "verification": verify_proof(d["audit_proof"])})
        state, parent = new_state, proof_id
    return steps
