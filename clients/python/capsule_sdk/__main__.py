"""python3 -m capsule_sdk verify FILE [--trust-manifest M] [--json]: offline verification.

Exit 0 when every file verifies, 1 when one does not, 2 on a usage or read error.
"""

from __future__ import annotations

import json
import sys

from .verify import verdict_line, verify_proof_json


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "verify":
        print(__doc__.strip().splitlines()[0], file=sys.stderr)
        return 2
    args = argv[1:]
    as_json = "--json" in args
    args = [a for a in args if a != "--json"]
    manifest = None
    if "--trust-manifest" in args:
        i = args.index("--trust-manifest")
        if i + 1 >= len(args):
            print("--trust-manifest: expected a file", file=sys.stderr)
            return 2
        with open(args[i + 1], "rb") as f:
            manifest = json.loads(f.read())
        del args[i:i + 2]
    if not args:
        print("capsule_sdk verify: no proof file given", file=sys.stderr)
        return 2
    code = 0
    for path in args:
        try:
            with open(path, "rb") as f:
                text = f.read()
        except OSError as e:
            print(f"{path}: {e.strerror}", file=sys.stderr)
            return 2
        r = verify_proof_json(text, manifest)
        try:
            doc = json.loads(text)
        except ValueError:
            doc = None
        if as_json:
            print(json.dumps(r, sort_keys=True))
        else:
            print(f"{path}: {verdict_line(r, doc)}")
        if not r["valid"]:
            code = 1
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
