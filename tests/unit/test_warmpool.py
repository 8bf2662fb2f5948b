"""The warm pool's cache (byoc.warmpool): used when the job has a usable directory, never a reason
for a job to fail; requirements.txt installs through it, and once more without it if pip fails
with it (a spoiled or full cache)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from byoc import code, settings, warmpool
from byoc import constants as C


def test_a_usable_directory_holds_pip_and_the_compile_caches(tmp_path):
    cache = warmpool.prepare(str(tmp_path))
    ours = tmp_path / "byoc"
    assert cache.pip == ours / "pip" and cache.pip.is_dir()
    assert cache.env == {
        "TORCHINDUCTOR_CACHE_DIR": str(ours / "torchinductor"),
        "TRITON_CACHE_DIR": str(ours / "triton"),
    }
    assert "the warm pool's cache" in cache.note
    assert warmpool.prepare(str(tmp_path)) == cache  # a second job finds it as it was


def test_no_directory_no_cache_no_note():
    assert warmpool.prepare("") == warmpool.Cache()


def test_the_setting_is_read_with_the_others():
    assert settings.load({C.WARMPOOL_CACHE_ENV: "/opt/ml/sagemaker/warmpoolcache"}).warm_pool_cache
    assert settings.load({}).warm_pool_cache == ""


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: "relative/dir", "is not an absolute path"),
        (lambda d: str(d / "missing"), "is not a directory"),
        (lambda d: (d / "f").write_text("x") and str(d / "f"), "is not a directory"),
        # Garbage where the cache goes: a file named like its directory.
        (lambda d: ((d / "byoc").mkdir(), (d / "byoc" / "pip").write_text("x")) and str(d),
         "cannot be used"),
        (lambda d: ((d / "byoc").mkdir(), (d / "byoc" / "pip").symlink_to(d)) and str(d),
         "is not a writable directory"),
    ],
)  # fmt: skip
def test_an_unusable_directory_means_no_cache_and_says_why(tmp_path, make, message):
    cache = warmpool.prepare(make(tmp_path))
    assert (cache.pip, cache.env) == (None, {})
    assert C.WARMPOOL_CACHE_ENV in cache.note and message in cache.note, cache.note


def test_a_nearly_full_disk_means_no_cache(tmp_path, monkeypatch):
    usage = shutil._ntuple_diskusage(100 << 30, 99 << 30, 1 << 20)  # noqa: SLF001
    monkeypatch.setattr(warmpool.shutil, "disk_usage", lambda p: usage)
    cache = warmpool.prepare(str(tmp_path))
    assert cache.pip is None and "1 MiB free" in cache.note
    assert not (tmp_path / "byoc").exists()


def test_a_read_only_directory_means_no_cache(tmp_path, monkeypatch):
    def read_only(self, *a, **kw):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(Path, "mkdir", read_only)
    cache = warmpool.prepare(str(tmp_path))
    assert cache.pip is None and "Read-only file system" in cache.note


def test_pip_failing_with_the_cache_tries_once_more_without_it(tmp_path, monkeypatch, capsys):
    (tmp_path / "requirements.txt").write_text("six\n")
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1 if "--cache-dir" in cmd else 0)

    monkeypatch.setattr(code.subprocess, "run", fake_run)
    code.install_requirements(tmp_path, tmp_path / "cache")
    assert ["--cache-dir", str(tmp_path / "cache")] == calls[0][5:7]
    assert "--no-cache-dir" in calls[1]
    assert "once more without it" in capsys.readouterr().out


def test_pip_failing_without_a_cache_fails_once(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("six\n")
    calls = []

    def fake_run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 3)

    monkeypatch.setattr(code.subprocess, "run", fake_run)
    with pytest.raises(code.CodeError, match="failed with exit code 3"):
        code.install_requirements(tmp_path)
    assert len(calls) == 1 and "--no-cache-dir" in calls[0]
