"""byoc.cuda_compat: the image's compat driver is used exactly when the host's is older."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from byoc import cuda_compat

from tests.unit.fakes import OPEN, PROPRIETARY

ROOT = Path(__file__).resolve().parents[2]


# /proc/driver/nvidia/version as the proprietary and the open kernel modules write it.
@pytest.fixture
def host(tmp_path):
    """A compat dir with libcuda 580.95.05 (as cuda-compat-13-0 has it) and a version file."""
    compat = tmp_path / "compat"
    compat.mkdir()
    (compat / "libcuda.so.580.95.05").write_bytes(b"")
    (compat / "libcuda.so.1").symlink_to("libcuda.so.580.95.05")
    version = tmp_path / "version"

    def decide(env, driver=None, template=PROPRIETARY):
        if driver is not None:
            version.write_text(template.format(v=driver))
        return cuda_compat.decide(env, compat_dir=compat, version_file=version)

    decide.compat = str(compat)
    return decide


@pytest.mark.parametrize("template", [PROPRIETARY, OPEN], ids=["proprietary", "open"])
def test_older_host_driver_puts_compat_first(host, template):
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib:/usr/local/nvidia/lib64"}
    why = host(env, "535.104.12", template)
    assert env["LD_LIBRARY_PATH"] == f"{host.compat}:/usr/local/nvidia/lib:/usr/local/nvidia/lib64"
    assert "535.104.12 is older than CUDA's 580.95.05" in why and "BYOC_CUDA_COMPAT=off" in why


@pytest.mark.parametrize("driver", ["580.95.05", "580.105.08", "590.44.01"])
def test_same_or_newer_host_driver_keeps_its_own(host, driver):
    env = {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib"}
    assert host(env, driver) is None
    assert env == {"LD_LIBRARY_PATH": "/usr/local/nvidia/lib"}


def test_no_gpu_driver_visible_changes_nothing(host):
    env = {}
    assert host(env) is None  # no version file: a CPU host
    assert env == {}


def test_no_compat_driver_in_the_image_changes_nothing(tmp_path):
    version = tmp_path / "version"
    version.write_text(PROPRIETARY.format(v="535.104.12"))
    env = {"BYOC_CUDA_COMPAT": "on"}
    assert cuda_compat.decide(env, tmp_path / "absent", version) is None
    assert "LD_LIBRARY_PATH" not in env


def test_off_and_on_override_the_version_check(host):
    env = {"BYOC_CUDA_COMPAT": "off"}
    assert host(env, "470.82.01") is None and "LD_LIBRARY_PATH" not in env
    env = {"BYOC_CUDA_COMPAT": "on", "LD_LIBRARY_PATH": ""}
    assert "BYOC_CUDA_COMPAT=on" in host(env, "590.44.01")
    assert env["LD_LIBRARY_PATH"] == host.compat


def test_applying_twice_does_not_repeat_the_directory(host):
    env = {}
    host(env, "535.104.12")
    host(env, "535.104.12")
    assert env["LD_LIBRARY_PATH"] == host.compat


def test_unreadable_versions_are_ignored(host, tmp_path):
    env = {}
    assert host(env, "garbage") is None
    broken = tmp_path / "compat2"
    broken.mkdir()
    (broken / "libcuda.so.1").symlink_to("libcuda.so.weird")
    (broken / "libcuda.so.weird").write_bytes(b"")
    assert cuda_compat.compat_driver(broken) is None


def test_bad_setting_is_an_error(host):
    with pytest.raises(cuda_compat.CompatError, match="expected one of auto, on, off"):
        host({"BYOC_CUDA_COMPAT": "yes"}, "535.104.12")


def test_byoc_init_refuses_a_bad_setting_before_running_anything(tmp_path):
    marker = tmp_path / "ran"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "entrypoint"), BYOC_CUDA_COMPAT="maybe")
    result = subprocess.run(
        [sys.executable, "-m", "byoc.init", "touch", str(marker)],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert result.returncode == 2, result
    assert "BYOC_CUDA_COMPAT='maybe'" in result.stderr
    assert not marker.exists()
