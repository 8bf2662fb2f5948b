"""hostkit/horovod_suites.py without Docker: the expected-failures file and its refusals, the
verdict on JUnit reports and rank exit statuses, the source archive's checks, the arguments;
scripts/canary.sh's refusals."""

from __future__ import annotations

import io
import json
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from hostkit import HostError
from hostkit import horovod_suites as hs

ROOT = Path(__file__).resolve().parents[2]
TORCH = hs.SUITES[0]
NEW = "parallel/test_torch.py::TorchTests::test_new_failure"
JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="4">
<testcase classname="test_torch.TorchTests" name="test_ok" time="0.1"/>
<testcase classname="test_torch.TorchTests" name="test_listed" time="0.1">
  <failure message="ValueError: Muon only supports 2D parameters">trace</failure></testcase>
<testcase classname="test_torch.TorchTests" name="test_new_failure" time="0.1">
  <error message="RuntimeError: boom">trace</error></testcase>
<testcase classname="test_torch.TorchTests" name="test_gpu" time="0">
  <skipped message="No GPUs available"/></testcase>
<testcase classname="test_torch" name="test_module_level" time="0.1"/>
</testsuite></testsuites>
"""


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def entry(test="parallel/test_torch.py::TorchTests::test_listed", **extra) -> str:
    """One [[failure]] table; values written as TOML (json's forms serve for these)."""
    fields = {"test": test, "reason": "why", "upstream": "https://example.invalid/1", **extra}
    return "[[failure]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in fields.items())


# --- the expected-failures file ---
def test_the_repository_list_loads_and_every_entry_names_a_known_suite():
    entries = hs.load_expected(hs.EXPECTED)
    paths = {s.path for s in hs.SUITES}
    assert entries, "the list is empty: then the file should say so, not vanish"
    for e in entries:
        assert e.test.split("::")[0] in paths
        assert "TODO" not in e.reason + e.upstream, e.test


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[[failure]\n", "cannot read it"),
        ("[other]\nx = 1\n", "unknown top-level key"),
        ("failure = 3\n", "must be an array of tables"),
        (entry(reason=""), "'reason' must be a non-empty string"),
        (entry().replace('upstream = "https://example.invalid/1"\n', ""), "'upstream' must be"),
        (entry(test="parallel/test_tensorflow.py::T::t"), "is not <suite file>::[Class::]test"),
        (entry(test="parallel/test_torch.py"), "is not <suite file>::[Class::]test"),
        (entry() + entry(), "is listed twice"),
        (entry(controllers=["nccl"]), "'controllers' must be a list of"),
        (entry(controllers="gloo"), "'controllers' must be a list of"),
        (entry(images=[""]), "'images' must be a list of non-empty strings"),
        (entry(flavor="cpu"), "unknown field(s) ['flavor']"),
    ],
)
def test_a_bad_list_is_refused_naming_the_file_and_entry(tmp_path, text, message):
    path = write(tmp_path / "expected.toml", text)
    with pytest.raises(HostError) as exc:
        hs.load_expected(path)
    assert str(path) in str(exc.value) and message in str(exc.value)


def test_an_unreadable_list_is_refused(tmp_path):
    with pytest.raises(HostError, match="cannot read it"):
        hs.load_expected(tmp_path / "missing.toml")
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(HostError, match="cannot read it"):
        hs.load_expected(path)


def test_scopes_by_controller_and_image(tmp_path):
    (e,) = hs.load_expected(write(tmp_path / "x.toml", entry(controllers=["mpi"], images=["gpu"])))
    assert e.applies("pytorch-horovod:gpu-standin", "mpi")
    assert not e.applies("pytorch-horovod:gpu-standin", "gloo")
    assert not e.applies("pytorch-horovod:cpu", "mpi")


# --- the verdict ---
def test_junit_ids_and_outcomes(tmp_path):
    results = hs.parse_junit(write(tmp_path / "r.xml", JUNIT), TORCH.path)
    assert results["parallel/test_torch.py::TorchTests::test_ok"][0] == "passed"
    assert results["parallel/test_torch.py::TorchTests::test_listed"] == (
        "failed",
        "ValueError: Muon only supports 2D parameters",
    )
    assert results["parallel/test_torch.py::TorchTests::test_new_failure"][0] == "failed"
    assert results["parallel/test_torch.py::TorchTests::test_gpu"][0] == "skipped"
    assert results["parallel/test_torch.py::test_module_level"][0] == "passed"


def test_a_broken_report_is_a_problem_not_a_crash(tmp_path):
    with pytest.raises(ValueError, match="not a readable JUnit report"):
        hs.parse_junit(write(tmp_path / "r.xml", "<testsuites><testcase"), TORCH.path)


def test_a_test_failed_on_any_rank_failed():
    a = {"t::a": ("passed", ""), "t::b": ("skipped", "")}
    b = {"t::a": ("failed", "rank 1 differs"), "t::b": ("passed", "")}
    assert hs.merge([a, b]) == {"t::a": ("failed", "rank 1 differs"), "t::b": ("passed", "")}


def judge(tmp_path, expected_text: str, problems=(), controller="gloo"):
    expected = hs.load_expected(write(tmp_path / "e.toml", expected_text))
    results = hs.parse_junit(write(tmp_path / "r.xml", JUNIT), TORCH.path)
    return hs.judge("img:cpu", TORCH, controller, results, expected, list(problems), 1.0)


def test_only_an_unlisted_failure_fails_the_run(tmp_path):
    v = judge(tmp_path, entry() + entry("parallel/test_torch.py::TorchTests::test_new_failure"))
    assert v.ok and v.kind == "pass"
    assert v.counts == {"passed": 2, "failed": 2, "skipped": 1}
    v = judge(tmp_path, entry())
    assert not v.ok and v.kind == "fail"
    assert v.unexpected == [f"{NEW}: RuntimeError: boom"]
    assert v.expected == ["parallel/test_torch.py::TorchTests::test_listed"]


def test_a_listed_failure_that_passes_fails_the_run(tmp_path):
    text = entry() + entry("parallel/test_torch.py::TorchTests::test_new_failure")
    v = judge(tmp_path, text + entry("parallel/test_torch.py::TorchTests::test_ok"))
    assert not v.ok and v.xpassed == ["parallel/test_torch.py::TorchTests::test_ok"]


def test_an_entry_for_the_other_controller_does_not_excuse(tmp_path):
    text = entry(controllers=["mpi"]) + entry(NEW)
    assert not judge(tmp_path, text, controller="gloo").ok
    assert judge(tmp_path, text, controller="mpi").ok


def test_a_dead_rank_fails_the_run_whatever_the_results(tmp_path):
    text = entry() + entry("parallel/test_torch.py::TorchTests::test_new_failure")
    v = judge(tmp_path, text, problems=["rank 1: killed by SIGABRT (exit 134)"])
    assert not v.ok and v.kind == "abort"
    v = judge(tmp_path, text, problems=["hung: still running after 900 s"])
    assert v.kind == "hang"


def test_no_results_at_all_is_a_failure(tmp_path):
    v = hs.judge("img", TORCH, "gloo", {}, [], [], 1.0)
    assert not v.ok and v.problems == ["no test results at all"]


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({"rank0.rc": "0", "rank0.xml": "x", "rank1.rc": "1", "rank1.xml": "x"}, []),
        ({"rank0.rc": "134", "rank1.rc": "0", "rank1.xml": "x"}, ["rank 0: killed by SIGABRT"]),
        ({"rank0.rc": "0", "rank0.xml": "x"}, ["rank 1: no exit status"]),
        ({"rank0.rc": "5", "rank1.rc": "0", "rank1.xml": "x"}, ["rank 0: pytest exited 5"]),
        ({"rank0.rc": "1", "rank1.rc": "0", "rank1.xml": "x"}, ["rank 0: exit 1 but no JUnit"]),
        ({"rank0.rc": "garbage", "rank1.rc": "0", "rank1.xml": "x"}, ["rank 0: no exit status"]),
    ],
)
def test_rank_exit_statuses(tmp_path, files, expected):
    for name, text in files.items():
        write(tmp_path / name, text)
    problems = hs.rank_problems(tmp_path, 2)
    assert len(problems) == len(expected)
    for got, want in zip(problems, expected, strict=True):
        assert got.startswith(want), got


def test_a_listed_test_that_never_fails_or_passes_is_stale(tmp_path):
    expected = hs.load_expected(
        write(tmp_path / "e.toml", entry() + entry("parallel/test_torch.py::TorchTests::test_gone"))
    )
    v = hs.Verdict("img", "torch", "gloo", 1.0, expected=[expected[0].test])
    stale = hs.stale_entries(expected, [v])
    assert len(stale) == 1 and stale[0].startswith("parallel/test_torch.py::TorchTests::test_gone")
    # A run that crashed proves nothing either way; a suite that did not run neither.
    v.problems = ["rank 0: killed by SIGABRT (exit 134)"]
    assert hs.stale_entries(expected, [v]) == []
    assert hs.stale_entries(expected, [hs.Verdict("img", "timeline", "gloo", 1.0)]) == []


# --- the source ---
def tarball(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_only_test_tree_is_extracted(tmp_path, monkeypatch):
    monkeypatch.setattr(hs, "PATCHES", tmp_path / "no-patches")
    members = {"horovod-0.28.1/setup.py": b"x", "horovod-0.28.1/test/parallel/test_torch.py": b""}
    tree = hs.extract_tests(tarball(tmp_path / "s.tar.gz", members), tmp_path / "out")
    assert tree == tmp_path / "out/horovod-0.28.1/test"
    assert (tree / "parallel/test_torch.py").is_file()
    assert not (tmp_path / "out/horovod-0.28.1/setup.py").exists()


def test_an_archive_without_tests_or_with_escapes_is_refused(tmp_path):
    with pytest.raises(HostError, match="has no <name>/test/ tree"):
        hs.extract_tests(tarball(tmp_path / "a.tar.gz", {"x/setup.py": b""}), tmp_path / "o1")
    evil = tarball(tmp_path / "b.tar.gz", {"x/test/../../../escaped": b"owned"})
    with pytest.raises(tarfile.FilterError):
        hs.extract_tests(evil, tmp_path / "o2")
    assert not (tmp_path / "escaped").exists()


def test_a_test_fix_that_no_longer_applies_is_refused(tmp_path):
    # Upstream's file differs from what our patch expects: refused, naming the patch.
    members = {f"horovod-0.28.1/test/{s.path}": b"changed\n" for s in hs.SUITES}
    with pytest.raises(HostError, match="does not apply to the tag's tests"):
        hs.extract_tests(tarball(tmp_path / "s.tar.gz", members), tmp_path / "out")


def test_a_given_source_must_be_the_pinned_archive(tmp_path):
    with pytest.raises(HostError, match="is not a file"):
        hs.source_tarball(tmp_path / "missing.tar.gz", tmp_path)
    bogus = tarball(tmp_path / "bogus.tar.gz", {"horovod-0.28.1/test/x": b""})
    with pytest.raises(HostError, match="is not Horovod v.*tag archive"):
        hs.source_tarball(bogus, tmp_path)
    assert not list(tmp_path.glob("horovod-*.tar.gz*"))


def test_no_mirror_and_no_network_skips_saying_why(tmp_path, monkeypatch):
    monkeypatch.setenv("BYOC_GIT_MIRRORS", str(tmp_path / "no-mirrors"))
    real = hs.dockerfile.arg
    # Loopback's discard port refuses at once: the 'cannot be reached' path, no traffic out.
    monkeypatch.setattr(
        hs.dockerfile,
        "arg",
        lambda n: "http://127.0.0.1:9/h.tar.gz" if n == "HOROVOD_SRC_URL" else real(n),
    )
    got, why = hs.source_tarball(None, tmp_path)
    assert got is None and "cannot be reached" in why and "scripts/git-archive.sh horovod" in why


MIRROR = Path(os.environ.get("BYOC_GIT_MIRRORS") or "/work/.mirror") / "horovod+horovod/repo"


@pytest.mark.skipif(
    not MIRROR.is_dir(),
    reason="no git mirror of horovod/horovod here (BYOC_GIT_MIRRORS): checked where one is",
)
def test_the_mirror_gives_the_pinned_archive_with_every_suite(tmp_path):
    got, origin = hs.source_tarball(None, tmp_path)
    assert got is not None and "git mirror" in origin
    tree = hs.extract_tests(got, tmp_path / "src")
    for suite in hs.SUITES:
        assert (tree / suite.path).is_file(), suite.path


# --- arguments ---
@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--image", "x", "--repeat", "0"], "--repeat must be 1 to"),
        (["--image", "x", "--repeat", "1000"], "--repeat must be 1 to"),
        (["--image", "x", "--load", "-1"], "--load must be 0 to"),
        (["--image", "x", "--gpus", "999"], "--gpus must be 0 to"),
        (["--image", "x;rm -rf /"], "is not an image reference"),
        (["--image", "x", "--suite", "tensorflow"], "invalid choice"),
        (["--image", "x", "--controller", "nccl"], "invalid choice"),
        ([], "required: --image"),
    ],
)
def test_bad_arguments_exit_2_naming_them(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        hs.parse_args(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_commands_per_kind():
    cmd = hs.suite_command(TORCH, "mpi", "/out", gpus=0)
    assert cmd.startswith("horovodrun -np 2 -H localhost:2 --mpi conformance-rank /out ")
    assert "--timeout-method thread /horovod/test/parallel/test_torch.py" in cmd
    assert "-np 4 -H localhost:4" in hs.suite_command(TORCH, "gloo", "/out", gpus=4)
    static = next(s for s in hs.SUITES if s.name == "static_run")
    cmd = hs.suite_command(static, "", "/out", gpus=0)
    assert cmd.startswith("python /conformance/sshd.py && CONFORMANCE_SINGLE=1 conformance-rank")
    assert "--forked" in cmd


# --- the canary's refusals ---
@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "TORCH_VERSION is not set"),
        ({"TORCH_VERSION": "2.15.0; rm -rf /"}, "is not a release version"),
        ({"TORCH_VERSION": "latest"}, "is not a release version"),
        ({"TORCH_VERSION": "2.15.0", "TORCHVISION_VERSION": "../x"}, "TORCHVISION_VERSION='../x'"),
    ],
)
def test_canary_refuses_bad_versions_before_building(env, message):
    base = {k: v for k, v in os.environ.items() if not k.startswith(("TORCH_", "TORCHVISION_"))}
    # DOCKER points nowhere: a refusal must come before any build is tried.
    result = subprocess.run(
        ["bash", str(ROOT / "scripts/canary.sh")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**base, **env, "DOCKER": "/nonexistent/docker"},
    )
    assert result.returncode == 2 and message in result.stderr, result.stderr


def test_a_non_strict_entry_may_pass_and_is_noted(tmp_path):
    text = entry(NEW) + entry("parallel/test_torch.py::TorchTests::test_listed", strict=False)
    expected = hs.load_expected(write(tmp_path / "e.toml", text))
    passing = {"parallel/test_torch.py::TorchTests::test_listed": ("passed", "")}
    v = hs.judge("img", TORCH, "gloo", passing, expected, [], 1.0)
    assert v.ok and v.flaky_passed == ["parallel/test_torch.py::TorchTests::test_listed"]
    assert hs.stale_entries(expected[1:], [v]) == []
    with pytest.raises(HostError, match="'strict' must be true or false"):
        hs.load_expected(write(tmp_path / "bad.toml", entry(strict="no")))


def test_the_failure_line_is_the_exception_not_the_source():
    text = (
        "a = (<x>,), kw = {}\n    def f():\n>       raise X\nE   AssertionError: 4 != 2\nE   more"
    )
    assert hs.failure_line(text) == "AssertionError: 4 != 2"
    assert hs.failure_line("no E lines") == ""


def test_an_entry_that_hangs_its_run_is_not_run_and_never_stale(tmp_path):
    hangs = "parallel/test_torch.py::TorchTests::test_races"
    text = entry(NEW) + entry(hangs, hangs=True, controllers=["mpi"])
    expected = hs.load_expected(write(tmp_path / "e.toml", text))
    assert hs.not_run(TORCH, "img", "mpi", expected) == [hangs]
    assert hs.not_run(TORCH, "img", "gloo", expected) == []  # scoped like any entry
    timeline = next(s for s in hs.SUITES if s.name == "timeline")
    assert hs.not_run(timeline, "img", "mpi", expected) == []  # another suite's file
    cmd = hs.suite_command(TORCH, "mpi", "/out", 0, [hangs])
    assert cmd.endswith("test_torch.py -k 'not (test_races)'"), cmd
    assert " -k " not in hs.suite_command(TORCH, "gloo", "/out", 0)
    v = hs.judge("img", TORCH, "mpi", {NEW: ("failed", "E x")}, expected, [], 1.0)
    assert hs.stale_entries(expected[1:], [v]) == []  # it never ran, so it cannot be stale
    with pytest.raises(HostError, match="'hangs' must be true or false"):
        hs.load_expected(write(tmp_path / "bad.toml", entry(hangs="yes")))


def test_every_image_runs_the_library_suites_and_the_first_one_the_rest(tmp_path, monkeypatch):
    """What differs between the flavors' wheels is the library (NCCL built in or not): every
    suite that drives it through hvd.init runs on each image; a suite that exercises only
    Python shipped alike in both runs on the first image, and says why."""
    ran = []

    def fake_run_one(docker, image, ref, suite, controller, tree, out, expected, gpus):
        ran.append((image, suite.name, controller))
        return hs.Verdict(image, suite.name, controller, 0.0, counts={"passed": 1})

    monkeypatch.setattr(hs, "run_one", fake_run_one)
    monkeypatch.setattr(hs, "print_verdict", lambda v, log: None)
    args = hs.parse_args(["--image", "cpu-image", "--image", "gpu-image"])
    refs = {"cpu-image": "cpu-ref", "gpu-image": "gpu-ref"}
    assert hs.run_all(None, args, list(hs.SUITES), refs, tmp_path, tmp_path, []) == 0
    on = {image: {(s, c) for i, s, c in ran if i == image} for image in refs}
    everywhere = {(s.name, c) for s in hs.SUITES if not s.one_image for c in s.controllers}
    assert {("torch", "gloo"), ("torch", "mpi")} <= everywhere
    assert on["gpu-image"] == everywhere
    assert on["cpu-image"] == {(s.name, c) for s in hs.SUITES for c in s.controllers}
    for suite in hs.SUITES:
        assert not (suite.kind == "parallel" and suite.one_image), suite.name
