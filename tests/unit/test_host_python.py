"""One way to run the host tools: make runs them on the dev venv's python ($(PY), exported to the
shell tools), and the Python floor is stated once (hostkit.MIN_PYTHON) and checked on import."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import hostkit

ROOT = Path(__file__).resolve().parents[2]


def test_an_older_python_is_told_the_floor_not_shown_a_traceback():
    old = (hostkit.MIN_PYTHON[0], hostkit.MIN_PYTHON[1] - 1, 0, "final", 0)
    done = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.version_info = {old!r}; import hostkit"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    floor = ".".join(map(str, hostkit.MIN_PYTHON))
    assert done.returncode == 1
    assert f"needs Python {floor} or newer" in done.stderr
    assert "Traceback" not in done.stderr


def test_make_and_the_shell_tools_run_hostkit_through_the_venvs_python():
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^PY := .*\(VENV\).*/bin/python$", makefile, re.M)
    assert re.search(r"^export PY$", makefile, re.M)
    runs = re.findall(r"^\t.*-m hostkit\.\S+", makefile, re.M)
    runs += re.findall(r"^SUITES_CMD = .*", makefile, re.M)
    assert runs
    for line in runs:
        assert "$(PY) -m hostkit." in line, line
    for script in sorted((ROOT / "scripts").glob("*.sh")):
        for line in script.read_text().splitlines():
            if "-m hostkit." in line and not line.lstrip().startswith("#"):
                assert '"${PY:-python3}" -m hostkit.' in line, f"{script.name}: {line}"


def test_every_target_that_runs_a_host_tool_makes_the_venv_first():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("local-train", "build", "bench", "test-horovod", "canary", "test"):
        rule = re.search(rf"^{re.escape(target)}:([^#\n]*)", makefile, re.M)
        assert rule, target
        assert "$(DEV_STAMP)" in rule.group(1), f"{target}: {rule.group(1)}"
