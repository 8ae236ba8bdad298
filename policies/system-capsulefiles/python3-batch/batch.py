#!/usr/bin/env python3
"""Reference batch runner following the SPEC batch convention.

Reads JSON lines from /data/input/records.jsonl, writes one result per record
to /data/output/results.jsonl. Each record is an object
{"custom_id": "<1-256 chars>", "input": "<text>"}; the output of a record is
{"sha512": hex SHA-512 of the UTF-8 input, "characters": code points,
"words": runs separated by ASCII whitespace}. Streams line by line (memory
stays flat for any file size); a bad line yields an "errored" result and the
run goes on. Byte-for-byte the same results as ../node-batch/batch.mjs.
Usage: batch.py [INPUT [OUTPUT]]
"""
import hashlib
import json
import os
import re
import sys

INPUT = "/data/input/records.jsonl"
OUTPUT = "/data/output/results.jsonl"
MAX_LINE_BYTES = 1 << 20  # a longer line is one errored result, never a memory spike
CUSTOM_ID_MAX_CHARS = 256
ASCII_WS = re.compile(r"[ \t\n\r\f\v]+")
SURROGATE = re.compile(r"[\ud800-\udfff]")


def result(custom_id, output=None, code=None, message=None):
    return {
        "custom_id": custom_id,
        "status": "succeeded" if code is None else "errored",
        "output": output,
        "error_code": code,
        "error_message": message,
    }


def no_constants(name):
    raise ValueError(name)


def process(raw, lineno):
    """One result for one physical line, or None for a blank line."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return result(None, code="invalid_encoding", message=f"line {lineno}: not valid UTF-8")
    if text.strip(" \t\r\n") == "":
        return None
    try:
        rec = json.loads(text, parse_constant=no_constants)
    except (ValueError, RecursionError):
        return result(None, code="invalid_json", message=f"line {lineno}: not valid JSON")
    if not isinstance(rec, dict):
        return result(None, code="invalid_record", message=f"line {lineno}: a record must be a JSON object")
    cid = rec.get("custom_id")
    if not isinstance(cid, str) or cid == "" or len(cid) > CUSTOM_ID_MAX_CHARS or SURROGATE.search(cid):
        return result(None, code="invalid_record", message=f"line {lineno}: custom_id must be a string of 1 to {CUSTOM_ID_MAX_CHARS} characters")
    data = rec.get("input")
    if not isinstance(data, str):
        return result(cid, code="invalid_input", message="input must be a string")
    if SURROGATE.search(data):
        return result(cid, code="invalid_input", message="input is not well-formed Unicode")
    return result(cid, output={
        "sha512": hashlib.sha512(data.encode("utf-8")).hexdigest(),
        "characters": len(data),
        "words": len([w for w in ASCII_WS.split(data) if w]),
    })


def lines(f):
    """(line number, bytes or None when too long), streaming with bounded memory."""
    lineno = 0
    while True:
        raw = f.readline(MAX_LINE_BYTES + 1)
        if raw == b"":
            return
        lineno += 1
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # drop the rest of the over-long line
                raw = f.readline(1 << 16)
            yield lineno, None
            continue
        yield lineno, raw.rstrip(b"\n").rstrip(b"\r")


def main(argv):
    src = argv[1] if len(argv) > 1 else INPUT
    dst = argv[2] if len(argv) > 2 else OUTPUT
    counts = {"records": 0, "succeeded": 0, "errored": 0}
    # Written in place (the capsule's seccomp policy may refuse rename(2)); on
    # an I/O failure the half-written file is removed: whole or not at all.
    try:
        os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
        with open(src, "rb") as inp, open(dst, "w", encoding="utf-8", newline="\n", buffering=1 << 16) as out:
            for lineno, raw in lines(inp):
                if raw is None:
                    r = result(None, code="record_too_large", message=f"line {lineno}: longer than {MAX_LINE_BYTES} bytes")
                else:
                    r = process(raw, lineno)
                    if r is None:
                        continue
                counts["records"] += 1
                counts[r["status"]] += 1
                out.write(json.dumps(r, ensure_ascii=False, separators=(",", ":")))
                out.write("\n")
    except OSError as e:
        # The path and the OS reason only: never record content.
        sys.stderr.write(f"batch: {e.filename or src}: {e.strerror}\n")
        try:
            os.unlink(dst)
        except OSError:
            pass
        return 1
    sys.stdout.write(json.dumps(counts) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
