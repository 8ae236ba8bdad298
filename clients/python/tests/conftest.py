import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
REPO = HERE.parent.parent.parent


def vector_dirs():
    dirs = os.environ.get("CAPSULE_VECTOR_DIRS")
    if dirs:
        return [pathlib.Path(d) for d in dirs.split(os.pathsep) if d]
    out = [REPO / "test/data/cdp-vectors"]
    shared = pathlib.Path("/work/shared/cdp/vectors")
    if shared.is_dir():
        out.append(shared)
    return out


@pytest.fixture(scope="session")
def live():
    """CAPSULE_BASE_URL and CAPSULE_API_KEY of a running service, or skip."""
    url, key = os.environ.get("CAPSULE_BASE_URL"), os.environ.get("CAPSULE_API_KEY")
    if not url or not key:
        pytest.skip("needs CAPSULE_BASE_URL and CAPSULE_API_KEY (a running capsule serve)")
    return url, key
