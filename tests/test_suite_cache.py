"""The suite's own hermetic setting (tests/conftest.py): a fresh bertkit cache per process, whatever the shell set."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_suite_never_uses_the_shells_bertkit_cache(tmp_path):
    """Run in one process (no xdist) with BERTKIT_CACHE_DIR set by the shell, a test sees a fresh cache of the
    suite's under the temp folder, and the shell's folder stays empty (it had been kept in one process)."""
    users = tmp_path / "users-cache"
    users.mkdir()
    probe = tmp_path / "test_where.py"
    probe.write_text("import os\n\ndef test_where():\n    print('CACHE=' + os.environ['BERTKIT_CACHE_DIR'])\n")
    shell = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}  # not an xdist worker's variables
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:xdist", "--rootdir", str(ROOT),
                           "-c", str(ROOT / "pyproject.toml"), "--confcutdir", str(ROOT / "tests"),
                           "-p", "tests.conftest", str(probe)],
                          cwd=ROOT, env={**shell, "BERTKIT_CACHE_DIR": str(users)}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    seen = next(line.split("=", 1)[1] for line in done.stdout.splitlines() if line.startswith("CACHE="))
    assert seen != str(users) and Path(seen).name.startswith("bertkit-test-cache-main-")
    assert Path(seen).parent == Path(tempfile.gettempdir())
    assert not Path(seen).exists()  # removed when that process ended
    assert list(users.iterdir()) == []
