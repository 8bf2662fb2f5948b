#!/usr/bin/env python3
"""`make test-horovod`: Horovod's own test suites, at the tag the image builds, on built images.

    python3 -m hostkit.horovod_suites --image pytorch-horovod:cpu [--image ...] [--suite torch ...]
        [--controller gloo|mpi] [--repeat N] [--load K] [--source TARBALL] [--gpus N]

The suites come from Horovod's tag archive (HOROVOD_SRC_URL / HOROVOD_SRC_SHA256 in the
Dockerfile), verified before use: --source (HOROVOD_SRC_TARBALL), else a git mirror
($BYOC_GIT_MIRRORS/horovod+horovod/repo, made with scripts/git-archive.sh), else a download.
Where none can be had the run skips, saying why (exit 0; --require-source makes that a failure).
Each image gets a throwaway test layer (tests/conformance/Dockerfile: pytest < 8, mock,
parameterized, pytest-forked, pytest-timeout, gdb; tagged <image>-conformance). Every suite runs
in a container of its own; each rank writes a JUnit report and its exit status.

The run fails on: a failure not in tests/conformance/expected-failures.toml, an expected failure
that passes (the list must stay true), a rank killed by a signal (its native stack from the core
dump is printed), a rank that left no report, a hang (the suite's time limit; the stacks of its
processes are printed). Results: build/horovod-suites/<stamp>/ (results.json, one log per run).
--repeat and --load are the soak (make test-horovod-soak): the same runs N times with K busy
containers beside them; the counts per image, suite and controller are printed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from hostkit import HostError, Teller, dockerfile, junit
from hostkit.docker import TIMED_OUT, Docker, build_client

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the dev venv has tomli (requirements-dev.txt)
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONFORMANCE = ROOT / "tests" / "conformance"
EXPECTED = CONFORMANCE / "expected-failures.toml"
PATCHES = CONFORMANCE / "patches"
FETCH = ROOT / "docker" / "build" / "fetch_verified.py"
GIT_ARCHIVE = ROOT / "scripts" / "git-archive.sh"
LABEL = "byoc-horovod-suites"
CONTROLLERS = ("gloo", "mpi")
UNREACHABLE = 75  # fetch_verified.py: the URL could not be reached
MAX_REPEAT = 100
MAX_LOAD = 16
MAX_GPUS = 64
# A test that takes longer than this is hung: pytest-timeout dumps every thread's stack and ends
# the rank (upstream's slowest torch test takes seconds here; elastic tests up to a minute).
TEST_TIMEOUT = 300


say = Teller("horovod-suites")


# --- what runs ---
@dataclass(frozen=True)
class Suite:
    name: str
    path: str  # under the tag's test/
    kind: str  # parallel: every rank runs pytest; single: one pytest --forked process
    controllers: tuple[str, ...] = ("",)  # "" for single suites: they pick their own
    timeout: int = 600  # seconds for the whole container
    why: str = ""
    sshd: bool = False  # root logs in to localhost / 127.0.0.1 over ssh (tests/conformance/sshd.py)
    # Why the suite runs on the first image given alone (CI time), where what it exercises is
    # the same in every flavor's wheel; empty: on every image.
    one_image: str = ""
    ranks: int = 2


# one_image's reasons.
RUNNER_ONLY = (
    "horovodrun's Python alone (no hvd.init, no Horovod library): the same files in both wheels"
)
DRIVER = (
    "the elastic driver and horovod.run() (Python, the same files in both wheels) with CPU "
    "tensors; what differs by flavor, the library's init, shutdown and collectives, the "
    "parallel suites run on every image"
)

SUITES: tuple[Suite, ...] = (
    Suite(
        "torch",
        "parallel/test_torch.py",
        "parallel",
        CONTROLLERS,
        900,
        "the PyTorch API: every collective, process sets, join, optimizers, state broadcast",
    ),
    Suite(
        "timeline",
        "parallel/test_timeline.py",
        "parallel",
        CONTROLLERS,
        300,
        "HOROVOD_TIMELINE written and started/stopped at run time",
    ),
    Suite(
        "adasum",
        "parallel/test_adasum_pytorch.py",
        "parallel",
        ("mpi",),
        300,
        "Adasum reduction (MPI only, as Horovod implements it)",
    ),
    Suite(
        "process_sets_static",
        "parallel/test_process_sets_static.py",
        "parallel",
        CONTROLLERS,
        300,
        "process sets given to hvd.init",
    ),
    Suite(
        "process_sets_multi_comm",
        "parallel/test_process_sets_multi_comm.py",
        "parallel",
        ("mpi",),
        300,
        "process sets from MPI communicators (mpi4py)",
    ),
    Suite(
        "elastic_torch",
        "integration/test_elastic_torch.py",
        "single",
        timeout=1200,
        why="elastic horovodrun end to end: hosts added, removed, failing, blacklisted",
        one_image=DRIVER,
    ),
    Suite(
        "static_run",
        "integration/test_static_run.py",
        "single",
        timeout=900,
        sshd=True,
        why="horovodrun on local, mixed and ssh hosts, both controllers, failures",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "interactiverun",
        "integration/test_interactiverun.py",
        "single",
        timeout=600,
        why="horovod.run() from Python (the notebook way)",
        one_image=DRIVER,
    ),
    Suite(
        "run",
        "single/test_run.py",
        "single",
        timeout=900,
        why="horovodrun's arguments, config file, host parsing, mpirun/gloo commands",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "elastic_driver",
        "single/test_elastic_driver.py",
        "single",
        timeout=600,
        why="the elastic driver: discovery, blacklisting, rendezvous, worker failures",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "elastic_run",
        "single/test_elastic_run.py",
        "single",
        timeout=600,
        why="horovod.run() elastic with fixed hosts and a discovery script",
        one_image=DRIVER,
    ),
    Suite(
        "elastic_discovery",
        "single/test_elastic_discovery.py",
        "single",
        timeout=300,
        why="host discovery scripts and slots",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "torch_elastic",
        "single/test_torch_elastic.py",
        "single",
        timeout=300,
        why="hvd.elastic TorchState and ElasticSampler",
    ),
    Suite(
        "service",
        "single/test_service.py",
        "single",
        timeout=300,
        why="the runner's driver/task services",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "task_service",
        "single/test_task_service.py",
        "single",
        timeout=300,
        why="task service commands and output",
        one_image=RUNNER_ONLY,
    ),
    Suite(
        "util",
        "single/test_util.py",
        "single",
        timeout=300,
        why="runner utilities",
        one_image=RUNNER_ONLY,
    ),
)
SUITE_NAMES = tuple(s.name for s in SUITES)


# --- the expected-failures file ---
@dataclass(frozen=True)
class Expected:
    test: str  # <path under test/>::<Class>::<test>
    reason: str
    upstream: str
    controllers: tuple[str, ...]
    images: tuple[str, ...]  # substrings of the image name; empty: every image
    strict: bool = True  # False: timing-dependent upstream, a pass is reported, not a failure
    # True: not run at all (pytest -k): when it fails, the ranks leave it out of step and every
    # later test of the run hangs, so one race would cost the whole suite its results.
    hangs: bool = False

    def applies(self, image: str, controller: str) -> bool:
        return (not self.controllers or controller in self.controllers) and (
            not self.images or any(i in image for i in self.images)
        )


def load_expected(path: Path) -> list[Expected]:
    """tests/conformance/expected-failures.toml, checked field by field."""
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise HostError(f"{path}: cannot read it: {exc}") from exc
    unknown = set(data) - {"failure"}
    if unknown:
        raise HostError(f"{path}: unknown top-level key(s) {sorted(unknown)}; only [[failure]]")
    entries = data.get("failure", [])
    if not isinstance(entries, list):
        raise HostError(f"{path}: 'failure' must be an array of tables ([[failure]])")
    paths = {s.path for s in SUITES}
    out, seen = [], set()
    for i, e in enumerate(entries, 1):
        where = f"{path}: failure #{i}"
        if not isinstance(e, dict):
            raise HostError(f"{where}: must be a table")
        extra = set(e) - {"test", "reason", "upstream", "controllers", "images", "strict", "hangs"}
        if extra:
            raise HostError(f"{where}: unknown field(s) {sorted(extra)}")
        for key in ("test", "reason", "upstream"):
            if not isinstance(e.get(key), str) or not e[key].strip():
                raise HostError(f"{where}: '{key}' must be a non-empty string")
        test = e["test"].strip()
        if test.split("::")[0] not in paths or test.count("::") not in (1, 2):
            raise HostError(
                f"{where}: test '{test}' is not <suite file>::[Class::]test of a suite this "
                f"runner knows ({', '.join(sorted(paths))})"
            )
        if test in seen:
            raise HostError(f"{where}: test '{test}' is listed twice")
        seen.add(test)
        controllers = e.get("controllers", [])
        if not isinstance(controllers, list) or any(c not in CONTROLLERS for c in controllers):
            raise HostError(f"{where}: 'controllers' must be a list of {list(CONTROLLERS)}")
        images = e.get("images", [])
        if not isinstance(images, list) or any(not isinstance(i, str) or not i for i in images):
            raise HostError(f"{where}: 'images' must be a list of non-empty strings")
        strict, hangs = e.get("strict", True), e.get("hangs", False)
        if not isinstance(strict, bool):
            raise HostError(f"{where}: 'strict' must be true or false")
        if not isinstance(hangs, bool):
            raise HostError(f"{where}: 'hangs' must be true or false")
        out.append(
            Expected(
                test,
                e["reason"].strip(),
                e["upstream"].strip(),
                tuple(controllers),
                tuple(images),
                strict,
                hangs,
            )
        )
    return out


# --- results ---
SEVERITY = {"skipped": 0, "passed": 1, "failed": 2}


def test_id(suite_path: str, classname: str, name: str) -> str:
    """upstream file::Class::test from a JUnit testcase (classname 'test_torch.TorchTests')."""
    module = Path(suite_path).stem
    parts = [p for p in classname.split(".") if p]
    cls = parts[-1] if parts and parts[-1] != module else ""
    return "::".join([suite_path, cls, name] if cls else [suite_path, name])


def failure_line(text: str) -> str:
    """The first 'E   ...' line of pytest's report: the exception, not the frame's source."""
    for line in text.splitlines():
        if line.startswith("E   "):
            return line[1:].strip()
    return ""


def parse_junit(path: Path, suite_path: str) -> dict[str, tuple[str, str]]:
    """{test id: (passed|failed|skipped, message)} from one pytest JUnit report."""
    results: dict[str, tuple[str, str]] = {}
    for case in junit.cases(path):
        tid = test_id(suite_path, case.classname, case.name)
        message = case.message
        if case.outcome == "failed":
            message = failure_line(case.text) or case.message
        prev = results.get(tid)
        if prev is None or SEVERITY[case.outcome] > SEVERITY[prev[0]]:
            results[tid] = (case.outcome, message)
    return results


def merge(per_rank: list[dict[str, tuple[str, str]]]) -> dict[str, tuple[str, str]]:
    """A test failed if it failed on any rank; passed if it passed on one and failed on none."""
    merged: dict[str, tuple[str, str]] = {}
    for results in per_rank:
        for tid, (outcome, message) in results.items():
            prev = merged.get(tid)
            if prev is None or SEVERITY[outcome] > SEVERITY[prev[0]]:
                merged[tid] = (outcome, message)
    return merged


def signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def rank_problems(out: Path, ranks: int) -> list[str]:
    """What each rank's exit status says beyond its test results."""
    problems = []
    for r in range(ranks):
        rc_file, xml = out / f"rank{r}.rc", out / f"rank{r}.xml"
        try:
            rc = int(rc_file.read_text().strip())
        except (OSError, ValueError):
            problems.append(f"rank {r}: no exit status: killed before pytest returned")
            continue
        if rc >= 128:
            problems.append(f"rank {r}: killed by {signal_name(rc - 128)} (exit {rc})")
        elif rc not in (0, 1):
            meaning = {
                2: "interrupted or a collection error",
                3: "pytest internal error",
                4: "usage error",
                5: "no tests collected",
            }.get(rc, "unknown")
            problems.append(f"rank {r}: pytest exited {rc} ({meaning})")
        elif not xml.is_file():
            problems.append(f"rank {r}: exit {rc} but no JUnit report (a test timed out?)")
    return problems


@dataclass
class Verdict:
    image: str
    suite: str
    controller: str
    seconds: float
    counts: dict[str, int] = field(default_factory=dict)
    unexpected: list[str] = field(default_factory=list)  # failures not in the list
    xpassed: list[str] = field(default_factory=list)  # listed failures that passed: their ids
    expected: list[str] = field(default_factory=list)
    flaky_passed: list[str] = field(default_factory=list)  # non-strict entries that passed
    not_run: list[str] = field(default_factory=list)  # entries with hangs = true: deselected
    notes: list[str] = field(default_factory=list)  # said, not failing
    problems: list[str] = field(default_factory=list)  # dead ranks, hangs, missing reports

    @property
    def ok(self) -> bool:
        return not (self.unexpected or self.xpassed or self.problems)

    @property
    def kind(self) -> str:
        """One word for the soak's counts."""
        if any("killed by" in p for p in self.problems):
            return "abort"
        if any("hung" in p or "timed out" in p for p in self.problems):
            return "hang"
        return "pass" if self.ok else "fail"


def judge(
    image: str,
    suite: Suite,
    controller: str,
    results: dict[str, tuple[str, str]],
    expected: list[Expected],
    problems: list[str],
    seconds: float,
) -> Verdict:
    v = Verdict(image, suite.name, controller, seconds, problems=list(problems))
    listed = {e.test: e for e in expected if e.applies(image, controller)}
    for tid, (outcome, message) in sorted(results.items()):
        v.counts[outcome] = v.counts.get(outcome, 0) + 1
        entry = listed.get(tid)
        if outcome == "failed" and entry is None:
            v.unexpected.append(f"{tid}: {message.splitlines()[0][:300] if message else ''}")
        elif outcome == "failed":
            v.expected.append(tid)
        elif outcome == "passed" and entry is not None and entry.strict:
            v.xpassed.append(tid)
        elif outcome == "passed" and entry is not None:
            v.flaky_passed.append(tid)
    if not results and not problems:
        v.problems.append("no test results at all")
    return v


# --- the source ---
def source_tarball(given: Path | None, work: Path) -> tuple[Path | None, str]:
    """The verified tag archive, and where it came from; (None, why) where none can be had."""
    version = dockerfile.arg("HOROVOD_VERSION")
    url = dockerfile.arg("HOROVOD_SRC_URL")
    sha = dockerfile.arg("HOROVOD_SRC_SHA256")
    out = work / f"horovod-{version}.tar.gz"
    if given is not None:
        if not given.is_file():
            raise HostError(f"--source / HOROVOD_SRC_TARBALL={given} is not a file")
        cmd = [sys.executable, str(FETCH), "--local", str(given), url, sha, str(out)]
        if subprocess.run(cmd, check=False).returncode != 0:
            raise HostError(f"{given} is not Horovod v{version}'s tag archive (sha256 above)")
        return out, str(given)
    mirror = Path(os.environ.get("BYOC_GIT_MIRRORS") or "/work/.mirror") / "horovod+horovod/repo"
    if mirror.is_dir():
        made = subprocess.run([str(GIT_ARCHIVE), "horovod", str(mirror), str(out)], check=False)
        if made.returncode == 0:
            return out, f"git mirror {mirror}"
        raise HostError(f"the git mirror {mirror} does not give Horovod v{version}'s archive")
    rc = subprocess.run([sys.executable, str(FETCH), url, sha, str(out)], check=False).returncode
    if rc == 0:
        return out, url
    if rc == UNREACHABLE:
        return None, (
            f"no source for Horovod v{version}'s tests: {url} cannot be reached, no git mirror "
            f"at {mirror}, no HOROVOD_SRC_TARBALL; make one with scripts/git-archive.sh horovod"
        )
    raise HostError(f"{url} did not verify (above)")


def extract_tests(tarball: Path, dest: Path) -> Path:
    """test/ of the archive, and nothing else (members filtered: nothing lands outside dest),
    with our fixes of upstream's tests applied (tests/conformance/patches/, each says why)."""
    with tarfile.open(tarball, "r:gz") as tar:
        members = tar.getmembers()
        prefix = members[0].name.split("/")[0] if members else ""
        wanted = [m for m in members if m.name.startswith(f"{prefix}/test/")]
        if not prefix or not wanted:
            raise HostError(f"{tarball} has no <name>/test/ tree")
        tar.extractall(dest, members=wanted, filter="data")
    for patch in sorted(PATCHES.glob("*.patch")):
        res = subprocess.run(
            ["patch", "-p1", "--forward", "--batch", "-d", str(dest / prefix), "-i", str(patch)],
            capture_output=True,
            text=True,
            check=False,
        )
        if res.returncode != 0:
            raise HostError(f"{patch} does not apply to the tag's tests:\n{res.stdout}{res.stderr}")
    return dest / prefix / "test"


# --- Docker ---
def host_ca() -> str:
    """What `scripts/docker.sh ca` prints: the host's CA bundle, or empty where it finds none."""
    res = subprocess.run(
        [str(ROOT / "scripts" / "docker.sh"), "ca"], capture_output=True, text=True, check=False
    )
    return res.stdout.strip()


def test_image(docker: Docker, image: str, ca: str) -> str:
    """<image>-conformance: the test layer on the image under test (cached after the first);
    ca: the host's CA bundle (a TLS-intercepting proxy) for pip, as a build secret, or ''."""
    if not docker.exists(image):
        raise HostError(
            f"image {image} not found: build it first (make build FLAVOR=cpu; "
            "make build-gpu-standin for the gpu stand-in)"
        )
    last = image.rsplit("/", maxsplit=1)[-1]
    ref = f"{image}-conformance" if ":" in last else f"{image}:latest-conformance"
    cmd = ["--progress=plain", "-q", "--build-arg", f"IMAGE={image}", "-t", ref]
    if ca:
        cmd += ["--secret", f"id=ca,src={ca}"]
    start = time.monotonic()
    res = docker.build(*cmd, str(CONFORMANCE), check=False)
    if res.returncode != 0:
        raise HostError(f"building the test layer {ref} failed:\n{res.stderr[-3000:]}")
    say(f"test layer {ref} ready ({time.monotonic() - start:.0f} s)")
    return ref


def not_run(suite: Suite, image: str, controller: str, expected: list[Expected]) -> list[str]:
    """The listed tests of this suite run that hang the rest of it when they fail."""
    return [
        e.test
        for e in expected
        if e.hangs and e.test.split("::")[0] == suite.path and e.applies(image, controller)
    ]


def suite_command(
    suite: Suite, controller: str, out: str, gpus: int, deselect: Sequence[str] = ()
) -> str:
    target = f"/horovod/test/{suite.path}"
    pytest = f"-o junit_family=xunit1 --timeout {TEST_TIMEOUT} --timeout-method thread {target}"
    if deselect:  # by the test's name: ids are relative to each rank's directory
        names = " or ".join(sorted({t.rsplit("::", 1)[1] for t in deselect}))
        pytest += f" -k 'not ({names})'"
    steps = []
    if suite.sshd:
        steps.append("python /conformance/sshd.py")
    if suite.kind == "parallel":
        ranks = gpus or suite.ranks
        steps.append(
            f"horovodrun -np {ranks} -H localhost:{ranks} --{controller} "
            f"conformance-rank {out} {pytest}"
        )
    else:
        steps.append(f"CONFORMANCE_SINGLE=1 conformance-rank {out} --forked {pytest}")
    return " && ".join(steps)


def collect_stacks(docker: Docker, cid: str) -> str:
    """Native stacks of every Python process in a hung container (gdb in the test layer)."""
    script = (
        'for p in $(pgrep -f "python"); do echo "--- pid $p: $(tr "\\0" " " </proc/$p/cmdline)";'
        ' timeout 60 gdb -p "$p" -batch -ex "thread apply all bt" 2>/dev/null'
        ' | grep -E "^(Thread|#)" | head -n 200; done'
    )
    res = docker("exec", cid, "bash", "-c", script, check=False, timeout=600)
    return res.stdout


def core_stacks(docker: Docker, ref: str, out: Path) -> str:
    """The native stack of each core dump a rank left (its cwd is out/rank<R>)."""
    texts = []
    for core in sorted(out.glob("rank*/core*")):
        rel = core.relative_to(out)
        res = docker(
            "run",
            "--rm",
            "--entrypoint",
            "",
            "-v",
            f"{out}:/out",
            ref,
            "bash",
            "-c",
            f'gdb -batch -ex "thread apply all bt" /opt/venv/bin/python "/out/{rel}" 2>/dev/null'
            ' | grep -E "^(Thread|#|Program terminated)" | head -n 300',
            check=False,
            timeout=600,
        )
        texts.append(f"--- {rel}\n{res.stdout}")
        core.unlink(missing_ok=True)  # hundreds of MB each; the stack is what is kept
    return "\n".join(texts)


def run_one(
    docker: Docker,
    image: str,
    ref: str,
    suite: Suite,
    controller: str,
    tree: Path,
    out: Path,
    expected: list[Expected],
    gpus: int,
) -> Verdict:
    out.mkdir(parents=True)
    # As upstream's CI runs them (cd into the suite's directory): its modules importable by the
    # workers a test starts (a pickled test function), and test/utils' `common`.
    suite_dir = f"/horovod/test/{Path(suite.path).parent}"
    env = {
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": f"{suite_dir}:/horovod/test/utils",
        "COLUMNS": "200",
        "HOROVOD_LOG_LEVEL": "warning",
    }
    if gpus:
        env["HOROVOD_TEST_GPU"] = "1"
    args = [
        "run",
        "-d",
        "--label",
        f"{LABEL}={os.getpid()}",
        "--shm-size=1g",
        "--ulimit",
        "core=-1:-1",
        "--cap-add",
        "SYS_PTRACE",
        "-v",
        f"{tree.parent}:/horovod:ro",
        "-v",
        f"{out}:/out",
        "-v",
        f"{CONFORMANCE}/sshd.py:/conformance/sshd.py:ro",
    ]
    for k, v in env.items():
        args += ["-e", f"{k}={v}"]
    if gpus:
        args += ["--gpus", "all"]
    deselect = not_run(suite, image, controller, expected)
    cmd = suite_command(suite, controller, "/out", gpus, deselect)
    cid = docker(*args, ref, "bash", "-c", cmd).stdout.strip()
    start = time.monotonic()
    problems, status, hung = [], "", ""
    try:
        status = docker("wait", cid, check=False, timeout=suite.timeout).stdout.strip()
    except HostError as exc:
        if exc.code != TIMED_OUT:
            raise
        problems.append(f"hung: still running after {suite.timeout} s (stacks in the log)")
        hung = "\n=== native stacks of the hung container ===\n" + collect_stacks(docker, cid)
    seconds = time.monotonic() - start
    logs = docker("logs", cid, check=False)
    log = out / "log.txt"
    log.write_text(logs.stdout + logs.stderr + hung)
    docker("rm", "-f", "-v", cid, check=False)
    ranks = (gpus or suite.ranks) if suite.kind == "parallel" else 1
    problems += rank_problems(out, ranks)
    # conformance-rank exits 0 after failed tests; anything else is a step that broke.
    if suite.kind == "single" and status not in ("", "0"):
        problems.append(f"the suite's container exited {status}")
    cores = core_stacks(docker, ref, out)
    notes = []
    if cores:
        with log.open("a") as f:
            f.write("\n=== native stacks from core dumps ===\n" + cores)
        if suite.kind == "parallel":
            problems.append(f"core dump(s): native stacks at the end of {log}")
        else:
            # A standalone suite's workers are what its tests start, stop and kill, and the tests
            # judge them. Their stacks are kept and noted; the rank itself dying is caught above.
            # The known cause (an elastic worker whose host was removed aborting in hvd.init(),
            # horovod#2484) is fixed by our patch init-failure-not-abort: a note is news.
            notes.append(f"a worker the tests started dumped core: stacks at the end of {log}")
    per_rank = []
    for r in range(ranks):
        xml = out / f"rank{r}.xml"
        if xml.is_file():
            try:
                per_rank.append(parse_junit(xml, suite.path))
            except ValueError as exc:
                problems.append(f"rank {r}: {exc}")
    verdict = judge(image, suite, controller, merge(per_rank), expected, problems, seconds)
    verdict.notes, verdict.not_run = notes, deselect
    return verdict


# --- the command ---
def print_verdict(v: Verdict, log: Path) -> None:
    counts = ", ".join(f"{n} {k}" for k, n in sorted(v.counts.items()))
    head = "ok" if v.ok else "FAILED"
    ctl = f" [{v.controller}]" if v.controller else ""
    say(
        f"{head}: {v.image} {v.suite}{ctl}: {counts or 'no results'}"
        f"{f', {len(v.expected)} expected failures' if v.expected else ''} ({v.seconds:.0f} s)"
    )
    for line in v.problems + v.unexpected:
        say(f"    {line}")
    for tid in v.xpassed:
        say(f"    {tid}: passed, but {EXPECTED.name} lists it as failing: take it out")
    for note in v.notes:
        say(f"    note: {note}")
    for tid in v.flaky_passed:
        say(f"    note: {tid} passed this time (listed as timing-dependent, strict = false)")
    for tid in v.not_run:
        say(f"    not run: {tid} (listed with hangs = true)")
    if not v.ok:
        say(f"    log: {log}")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--image", action="append", required=True, help="an image to test (repeat)")
    p.add_argument("--suite", action="append", choices=SUITE_NAMES, help="default: every suite")
    p.add_argument("--controller", action="append", choices=CONTROLLERS, help="default: both")
    p.add_argument("--repeat", type=int, default=1, help=f"runs of each (1-{MAX_REPEAT})")
    p.add_argument("--load", type=int, default=0, help=f"busy containers beside (0-{MAX_LOAD})")
    p.add_argument("--gpus", type=int, default=0, help="GPUs: one rank per GPU, NCCL tests on")
    p.add_argument("--source", type=Path, default=None, help="tag archive (HOROVOD_SRC_TARBALL)")
    p.add_argument("--require-source", action="store_true", help="no source is a failure")
    p.add_argument("--out", type=Path, default=ROOT / "build" / "horovod-suites")
    return p


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    a = p.parse_args(argv)
    if not 1 <= a.repeat <= MAX_REPEAT:
        p.error(f"--repeat must be 1 to {MAX_REPEAT}, not {a.repeat}")
    if not 0 <= a.load <= MAX_LOAD:
        p.error(f"--load must be 0 to {MAX_LOAD}, not {a.load}")
    if not 0 <= a.gpus <= MAX_GPUS:
        p.error(f"--gpus must be 0 to {MAX_GPUS}, not {a.gpus}")
    for image in a.image:
        if not re.fullmatch(r"[a-z0-9][a-z0-9._/-]*(:[\w][\w.-]{0,127})?", image):
            p.error(f"--image {image!r} is not an image reference")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    suites = [s for s in SUITES if not a.suite or s.name in a.suite]
    try:
        docker = Docker(build_client())
    except HostError as exc:
        say(f"error: {exc}")
        return exc.code
    try:
        expected = load_expected(EXPECTED)
        a.out.mkdir(parents=True, exist_ok=True)
        run_dir = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=a.out))
        tarball, origin = source_tarball(a.source, run_dir)
        if tarball is None:
            say(f"SKIPPED: {origin}")
            return 1 if a.require_source else 0
        tree = extract_tests(tarball, run_dir / "src")
        say(f"Horovod's tests from {origin} (sha256 verified) -> {tree}")
        ca = host_ca()
        refs = {image: test_image(docker, image, ca) for image in a.image}
        return run_all(docker, a, suites, refs, tree, run_dir, expected)
    except HostError as exc:
        say(f"error: {exc}")
        return exc.code
    finally:
        docker.remove_labelled(f"{LABEL}={os.getpid()}")


def run_all(docker, a, suites, refs, tree, run_dir, expected) -> int:
    if a.load:
        docker.busy(a.image[0], a.load, f"{LABEL}={os.getpid()}")
        say(f"{a.load} busy container(s) of {a.image[0]} run beside the suites")
    verdicts: list[Verdict] = []
    t0 = time.monotonic()
    for n in range(1, a.repeat + 1):
        for nth, (image, ref) in enumerate(refs.items()):
            for suite in suites:
                if suite.one_image and nth:  # the first image alone
                    continue
                for ctl in suite.controllers:
                    if a.controller and ctl not in a.controller and (ctl or a.repeat > 1):
                        continue  # single suites run with --controller, but not in the soak
                    name = image.replace("/", "_").replace(":", "_")
                    out = run_dir / f"{len(verdicts):03d}-{name}-{suite.name}{'-' * bool(ctl)}{ctl}"
                    prefix = f"[{n}/{a.repeat}] " if a.repeat > 1 else ""
                    say(f"{prefix}{image} {suite.name} {ctl}".rstrip() + " ...")
                    v = run_one(docker, image, ref, suite, ctl, tree, out, expected, a.gpus)
                    print_verdict(v, out / "log.txt")
                    verdicts.append(v)
    (run_dir / "results.json").write_text(
        json.dumps([v.__dict__ | {"ok": v.ok, "kind": v.kind} for v in verdicts], indent=1)
    )
    stale = stale_entries(expected, verdicts)
    for line in stale:
        say(f"stale entry in {EXPECTED.name}: {line}")
    say(summary(verdicts, a.repeat, time.monotonic() - t0))
    say(f"results: {run_dir}/results.json")
    return 0 if all(v.ok for v in verdicts) and not stale else 1


def stale_entries(expected: list[Expected], verdicts: list[Verdict]) -> list[str]:
    """Listed tests that neither failed nor passed in any clean run they apply to (skipped, or
    renamed or removed upstream): the list must stay true."""
    paths = {s.name: s.path for s in SUITES}
    stale = []
    for e in (e for e in expected if not e.hangs):  # never run: neither fails nor passes
        runs = [
            v
            for v in verdicts
            if paths[v.suite] == e.test.split("::")[0]
            and e.applies(v.image, v.controller)
            and not v.problems
        ]
        if runs and not any(e.test in v.expected + v.xpassed + v.flaky_passed for v in runs):
            stale.append(f"{e.test}: neither failed nor passed in {len(runs)} run(s) of its suite")
    return stale


def summary(verdicts: list[Verdict], repeat: int, seconds: float) -> str:
    ok = sum(v.ok for v in verdicts)
    lines = [f"{ok} of {len(verdicts)} suite runs passed in {seconds:.0f} s"]
    if repeat > 1:
        table: dict[tuple[str, str, str], dict[str, int]] = {}
        for v in verdicts:
            row = table.setdefault((v.image, v.suite, v.controller), {})
            row[v.kind] = row.get(v.kind, 0) + 1
        for (image, suite, ctl), row in sorted(table.items()):
            counts = ", ".join(f"{k} {n}" for k, n in sorted(row.items()))
            lines.append(f"  {image} {suite} {ctl}: {counts}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
