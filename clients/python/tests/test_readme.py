"""The README's example, run exactly as written against the live service."""
import os
import pathlib
import re
import subprocess
import sys

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_runs(live, tmp_path):
    block = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    (tmp_path / "example.py").write_text(block)
    env = {**os.environ, "PYTHONPATH": str(README.parent)}
    r = subprocess.run([sys.executable, "example.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "3 lines; AuditProof verified" in r.stdout
    assert "destruction verified" not in r.stdout.lower()
