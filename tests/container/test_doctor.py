"""`doctor` in the cpu image: `docker run IMAGE doctor` and `byoc doctor` in a running container.

The gpu flavor's checks (NCCL, the EFA plugin, a stand-in EFA host) are in test_efa.py.
"""

from __future__ import annotations

import json
import re


def test_docker_run_doctor_finds_a_small_shm_and_says_the_fix(containers):
    status, out = containers.run(["doctor"], shm_size="64m", timeout=120)
    assert status == 1, out
    assert re.search(r"^FAIL\s+shm\s+/dev/shm is 64 MiB", out, re.M), out
    assert "fix: docker run --shm-size=8g" in out, out
    assert re.search(r"^info\s+gpus\s+cpu flavor", out, re.M), out
    assert "doctor: 1 problem(s) that make training fail or crawl" in out, out
    assert "fabric:" in out.splitlines()[-2], out  # the NCCL decision, as byoc-init makes it


def test_doctor_json_is_ready_with_enough_shm(containers):
    status, out = containers.run(["doctor", "--json", "--no-network"], shm_size="2g", timeout=120)
    assert status == 0, out
    report = json.loads(out)  # nothing but the JSON document on stdout+stderr (cpu: no fabric line)
    assert report["ok"] is True
    checks = {c["check"]: c for c in report["checks"]}
    assert checks["shm"]["status"] == "ok" and "GiB" in checks["shm"]["detail"]
    assert "hosts" not in checks  # --no-network
    assert {c["status"] for c in report["checks"]} <= {"ok", "info", "warn"}


def test_byoc_doctor_inside_a_running_container(containers):
    c = containers.start(["sleep", "120"], shm_size="2g")
    result = c.exec_run(["byoc", "doctor", "--no-network"])
    out = result.output.decode()
    assert result.exit_code == 0, out
    assert "doctor: ready" in out, out
    result = c.exec_run(["byoc", "doctor", "--bogus"])
    assert result.exit_code == 2, result.output.decode()
