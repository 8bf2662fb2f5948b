"""Hostile input to `train` (the /opt/ml contract, the code it is given, its settings): each is
refused with exit 2 and a message naming the file and field (or the variable), quickly, with
nothing written outside the job's own tree, no traceback, and nothing left running.

`train` runs as a subprocess, as byoc-init runs it, on a fake /opt/ml under tmp_path, with HOME
in tmp_path too (so a write to ~/.ssh would show).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from tests.helpers import ended, wait_until
from tests.unit.fakes import run_train

ROOT = Path(__file__).resolve().parents[3]
OURS = [Path("/etc/ssh/ssh_config.d/00-byoc-job.conf"), Path("/run/byoc")]


def tree(tmp_path: Path, hosts=("algo-1",), current="algo-1", hps=None, channels=None, **rc):
    hosts = list(hosts) if isinstance(hosts, tuple) else hosts
    ml = tmp_path / "ml"
    config = ml / "input" / "config"
    config.mkdir(parents=True)
    resource = {"current_host": current, "hosts": hosts, **rc}
    (config / "resourceconfig.json").write_text(json.dumps(resource))
    (config / "hyperparameters.json").write_text(json.dumps(hps or {}))
    (config / "inputdataconfig.json").write_text(json.dumps(channels or {}))
    code = ml / "code"
    code.mkdir()
    (code / "ok.py").write_text("print('ran')\n")
    return ml


def listing(tmp_path: Path) -> dict[str, int]:
    """Every file outside the job's tree (and HOME), with its size."""
    return {
        str(p.relative_to(tmp_path)): p.stat().st_size if p.is_file() else -1
        for p in tmp_path.rglob("*")
        if not p.is_relative_to(tmp_path / "ml")
    }


def train(tmp_path: Path, env=None, timeout=60) -> tuple[int, str, str]:
    """(exit code, failure file, output); checks that nothing outside ml/ changed."""
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    before = listing(tmp_path)
    ours_before = [p.exists() for p in OURS]
    t0 = time.monotonic()
    base = {"PATH": os.environ["PATH"], "HOME": str(home)}
    result = run_train(tmp_path / "ml", timeout, base, **(env or {}))
    out = result.stdout + result.stderr
    assert time.monotonic() - t0 < 30, f"took {time.monotonic() - t0:.0f} s:\n{out}"
    assert "Traceback" not in out, out
    assert listing(tmp_path) == before, "written outside the job's tree"
    assert [p.exists() for p in OURS] == ours_before, "wrote the image's SSH set-up here"
    failure = tmp_path / "ml" / "output" / "failure"
    return result.returncode, failure.read_text() if failure.exists() else "", out


def refused(tmp_path, message: str, env=None) -> str:
    code, failure, out = train(tmp_path, env)
    assert code == 2, out
    assert message in failure, failure
    assert not (tmp_path / "ml" / "output" / "success").exists()
    return failure


def hp(**kw) -> dict:
    """As the SDK sends them: every value JSON-encoded."""
    return {k: json.dumps(v) for k, v in kw.items()}


PROGRAM = hp(sagemaker_program="ok.py")
RC = "resourceconfig.json"
HPS = "hyperparameters.json"
IDC = "inputdataconfig.json"


# --- injection: names that would become options or shell syntax -------------------------------
@pytest.mark.parametrize(
    "host",
    ["-oProxyCommand=touch pwned", "algo-1;touch pwned", "algo 1", "$(id)", "algo-1\n", "a" * 254],
)
def test_a_host_name_that_is_no_host_name_is_refused(tmp_path, host):
    tree(tmp_path, hosts=["algo-1", host], hps=PROGRAM)
    refused(tmp_path, f"{RC}: hosts: {host!r} is not a host name")


def test_a_current_host_that_is_no_host_name_is_refused(tmp_path):
    tree(tmp_path, hosts=["algo-1"], current="-x", hps=PROGRAM)
    refused(tmp_path, f"{RC}: current_host: '-x' is not a host name")


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("network_interface_name", ["eth0"]),
        ("network_interface_name", 5),
        ("current_instance_type", {"a": 1}),
        ("current_group_name", True),
    ],
)
def test_resourceconfig_fields_of_the_wrong_type_are_refused(tmp_path, field, value):
    tree(tmp_path, hps=PROGRAM, **{field: value})
    refused(tmp_path, f"{RC}: {field}: must be a string")


def test_instance_groups_of_the_wrong_type_are_refused(tmp_path):
    tree(tmp_path, hps=PROGRAM, instance_groups={"a": 1})
    refused(tmp_path, f"{RC}: instance_groups: must be a list of objects")


def group(name, *hosts, kind="ml.m5.xlarge") -> dict:
    return {"instance_group_name": name, "instance_type": kind, "hosts": list(hosts)}


HOSTS3 = ("algo-1", "algo-2", "algo-3")
TWO_GROUPS = [group("data", "algo-1"), group("train", "algo-2", "algo-3")]


@pytest.mark.parametrize(
    ("groups", "extra", "message"),
    [
        ([group("data", "algo-1", "algo-2"), group("train", "algo-2", "algo-3")], {},
         "instance_groups: 'algo-2' is in two groups, 'data' and 'train'"),
        ([group("data", "algo-1"), group("train")], {},
         "instance_groups[1].hosts: group 'train' has no hosts"),
        ([group("data", "algo-2"), group("train", "algo-3")], {},
         "instance_groups: the current host 'algo-1' is in no group"),
        ([group("data", "algo-1"), group("train", "algo-2", "algo-9")], {},
         "instance_groups[1].hosts: 'algo-9' of group 'train' is not one of hosts"),
        ([group("data", "algo-1"), group("data", "algo-2", "algo-3")], {},
         "instance_groups[1].instance_group_name: 'data': a group listed twice"),
        ([group("", "algo-1"), group("train", "algo-2", "algo-3")], {},
         "instance_groups[0].instance_group_name: '' is not a group name"),
        (TWO_GROUPS, {"current_group_name": "train"},
         "current_group_name: 'train', but 'algo-1' is in group 'data'"),
    ],
)  # fmt: skip
def test_malformed_instance_groups_are_refused_naming_the_field(tmp_path, groups, extra, message):
    tree(tmp_path, HOSTS3, hps=PROGRAM, instance_groups=groups, **extra)
    refused(tmp_path, f"{RC}: {message}")


@pytest.mark.parametrize(
    ("distributed", "groups", "message"),
    [
        (["gpu"], TWO_GROUPS, "['gpu'] not among the instance groups ['data', 'train']"),
        ([], TWO_GROUPS, "must be a list of instance group names"),
        ("train", TWO_GROUPS, "must be a list of instance group names"),
        (["train", "train"], TWO_GROUPS, "a group named twice"),
        (["train"], None, "names ['train'], but resourceconfig.json has no instance_groups"),
    ],
)
def test_distribution_groups_that_are_not_the_jobs_are_refused(
    tmp_path, distributed, groups, message
):
    hps = {**PROGRAM, "sagemaker_distribution_instance_groups": json.dumps(distributed)}
    extra = {"instance_groups": groups} if groups else {}
    tree(tmp_path, HOSTS3, hps=hps, **extra)
    refused(tmp_path, f"{HPS}: sagemaker_distribution_instance_groups: {message}")


# --- path traversal: names and archives that reach outside their place -------------------------
@pytest.mark.parametrize("name", ["../x", "..", ".", "", "a/b", "train\x00", "x" * 65, "tr ain"])
def test_a_channel_name_that_is_no_channel_name_is_refused(tmp_path, name):
    tree(tmp_path, hps=PROGRAM, channels={name: {"TrainingInputMode": "File"}})
    refused(tmp_path, f"{IDC}: {name!r}: not a channel name")


def test_submit_directory_that_holds_the_code_directory_is_refused(tmp_path):
    ml = tree(tmp_path)
    config = ml / "input" / "config"
    (config / HPS).write_text(
        json.dumps(hp(sagemaker_program="ok.py", sagemaker_submit_directory=str(ml)))
    )
    refused(tmp_path, "holds")


def archive(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    path = tmp_path / "ml" / "src.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for info, body in members:
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body) if body else None)
    return path


def member(name: str, kind=tarfile.REGTYPE, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    return info


@pytest.mark.parametrize(
    "members",
    [
        [(member("../escape.py"), b"x")],
        [(member("/tmp/byoc-escape-test/x.py"), b"x")],
        [(member("../code-evil/x.py"), b"x")],  # a sibling that shares the prefix "code"
        [(member("out", tarfile.SYMTYPE, "/tmp"), b""), (member("out/x.py"), b"x")],
        [(member("out", tarfile.SYMTYPE, "../.."), b"")],
        [(member("dev", tarfile.CHRTYPE), b"")],
        [(member("fifo", tarfile.FIFOTYPE), b"")],
        [(member("hard", tarfile.LNKTYPE, "../../etc/passwd"), b"")],
    ],
    ids=[
        "dotdot",
        "absolute",
        "sibling-prefix",
        "symlink-then-file",
        "symlink-out",
        "device",
        "fifo",
        "hardlink-out",
    ],
)
def test_an_archive_that_reaches_outside_the_code_directory_is_refused(tmp_path, members):
    ml = tree(tmp_path)
    src = archive(tmp_path, members)
    (ml / "input" / "config" / HPS).write_text(
        json.dumps(hp(sagemaker_program="ok.py", sagemaker_submit_directory=str(src)))
    )
    failure = refused(tmp_path, "User code: ")
    assert "is unsafe" in failure, failure
    assert not (tmp_path / "escape.py").exists() and not (ml / "code-evil").exists()


# --- silent acceptance of corrupt or contradictory input ---------------------------------------
def good_archive(tmp_path: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        body = b"print('hello')\n" * 4000
        info = tarfile.TarInfo("run.py")
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def bad_crc(data: bytes) -> bytes:
    return data[:-8] + bytes([data[-8] ^ 0xFF]) + data[-7:]


def bad_deflate(data: bytes) -> bytes:
    middle = len(data) // 2
    return data[:middle] + bytes(b ^ 0x5A for b in data[middle : middle + 16]) + data[middle + 16 :]


@pytest.mark.parametrize(
    "corrupt",
    [bad_crc, bad_deflate, lambda d: d[: len(d) // 2], lambda d: b"not a tarball at all"],
    ids=["gzip-crc", "deflate-bytes", "truncated", "garbage"],
)
def test_a_corrupt_code_archive_is_refused(tmp_path, corrupt):
    ml = tree(tmp_path)
    src = ml / "sourcedir.tar.gz"
    src.write_bytes(corrupt(good_archive(tmp_path)))
    (ml / "input" / "config" / HPS).write_text(
        json.dumps(hp(sagemaker_program="run.py", sagemaker_submit_directory=str(src)))
    )
    failure = refused(tmp_path, f"User code: {src} is corrupt")
    assert "hello" not in failure


def test_gzip_crc_is_what_the_corruption_breaks():
    """The test above is about the CRC: the archive itself stays readable."""
    with pytest.raises(gzip.BadGzipFile, match="CRC"):
        gzip.decompress(bad_crc(good_archive(Path())))


@pytest.mark.parametrize(
    ("hps", "message"),
    [
        ({"a-b": '"1"', "a_b": '"2"'}, "a_b: collides with 'a-b' (both are SM_HP_A_B)"),
        ({"": '"x"'}, "a hyperparameter name: must be 1 to 256 characters, not 0"),
        ({"k" * 257: '"x"'}, "must be 1 to 256 characters, not 257"),
        ({"big": json.dumps("x" * 2501)}, "big: must be 1 to 2500 characters"),
        (
            {"sagemaker_mpi_num_of_processes_per_host": "1000000000"},
            "must be a whole number from 1 to 256, got 1000000000",
        ),
        ({"sagemaker_mpi_num_of_processes_per_host": "0"}, "from 1 to 256, got 0"),
        ({"sagemaker_mpi_num_of_processes_per_host": '"two"'}, "from 1 to 256, got 'two'"),
        (
            {"sagemaker_mpi_enabled": "true", "sagemaker_torch_distributed_enabled": "true"},
            "sagemaker_torch_distributed_enabled: both true: choose one distribution",
        ),
        (
            {"sagemaker_mpi_enabled": '"perhaps"'},
            "hyperparameters.json: sagemaker_mpi_enabled: must be true or false, got 'perhaps'",
        ),
        (
            {"sagemaker_distributed_dataparallel_enabled": "true"},
            "smdistributed launcher, which this image does not have",
        ),
        ({"sagemaker_pytorch_ddp_enabled": "true"}, "Use distribution="),
        ({f"k{i}": '"v"' for i in range(100)}, "at most 100 hyperparameters, not 101"),
    ],
    ids=[
        "colliding-keys",
        "empty-key",
        "long-key",
        "long-value",
        "billion-processes",
        "zero-processes",
        "word-processes",
        "two-distributions",
        "not-a-boolean",
        "smdistributed",
        "pytorchddp",
        "too-many",
    ],
)
def test_hyperparameters_sagemaker_would_refuse_are_refused(tmp_path, hps, message):
    tree(tmp_path, hps={**PROGRAM, **hps})
    refused(tmp_path, message)


@pytest.mark.parametrize(
    ("channels", "message"),
    [
        ({"Train": {}, "train": {}}, "collides with channel 'Train'"),
        ({"a-b": {}, "a_b": {}}, "(both are SM_CHANNEL_A_B)"),
        ({"train": {"TrainingInputMode": "Stream"}}, "train.TrainingInputMode: 'Stream'"),
        ({"train": {"S3DistributionType": "Bogus"}}, "train.S3DistributionType: 'Bogus'"),
        ({"train": {"RecordWrapperType": "Zip"}}, "train.RecordWrapperType: 'Zip'"),
        ({"train": {"ContentType": 7}}, "ContentType: must be a string"),
        ({"train": "File"}, "train: must be an object, not str"),
        ({f"c{i}": {} for i in range(21)}, "at most 20 channels, not 21"),
    ],
    ids=["case", "dash", "mode", "distribution", "wrapper", "content-type", "not-object", "many"],
)
def test_channel_settings_sagemaker_would_refuse_are_refused(tmp_path, channels, message):
    tree(tmp_path, hps=PROGRAM, channels=channels)
    refused(tmp_path, message)


@pytest.mark.parametrize(
    ("hosts", "message"),
    [
        (["algo-1", "algo-1"], "hosts: a host is listed twice"),
        ([f"algo-{i}" for i in range(1001)], "hosts: must be a list of 1 to 1000 host names"),
        ([], "hosts: must be a list of 1 to 1000"),
        ("algo-1", "hosts: must be a list"),
    ],
    ids=["twice", "too-many", "none", "not-a-list"],
)
def test_host_lists_the_platform_would_never_write_are_refused(tmp_path, hosts, message):
    tree(tmp_path, hosts=hosts, hps=PROGRAM)
    refused(tmp_path, message)


# --- hangs: bounds that would never expire ----------------------------------------------------
@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("BYOC_PEER_TIMEOUT", "nan"),
        ("BYOC_LEADER_TIMEOUT", "inf"),
        ("BYOC_LEADER_LOST_AFTER", "-1"),
        ("BYOC_LEADER_LOST_AFTER", "0"),
        ("BYOC_TERM_GRACE", "abc"),
        ("BYOC_TERM_GRACE", "1e9"),
        ("BYOC_END_GRACE", "nan"),
        ("BYOC_END_GRACE", "0"),
        ("BYOC_END_GRACE", "7200"),
        ("HOROVOD_START_TIMEOUT", "1e9"),
        ("BYOC_COORDINATOR_PORT", "abc"),
        ("BYOC_TORCHRUN_PORT", "0"),
        ("BYOC_SSH_PORT", "65536"),
        ("BYOC_CPU_SLOTS_PER_HOST", "-2"),
        ("BYOC_LAUNCHER", "mpirun"),
        ("BYOC_RESTARTS", "-1"),
        ("BYOC_RESTARTS", "1000000"),
        ("BYOC_RESTARTS", "1.5"),
        ("BYOC_RESTARTS", "inf"),
    ],
)
def test_a_setting_out_of_bounds_stops_the_job_before_it_starts(tmp_path, name, value):
    tree(tmp_path, hps=PROGRAM)
    failure = refused(tmp_path, f"Invalid setting: {name}={value!r}: expected", {name: value})
    assert "ran" not in failure


# --- tracebacks instead of messages ---------------------------------------------------------------
@pytest.mark.parametrize(
    ("file", "content", "message"),
    [
        (HPS, "[" * 100000 + "]" * 100000, "nested too deeply"),
        (HPS, '{"a": "x\\u0000y"}', "a: holds a control character"),
        (HPS, '{"a": "x\x00y"}', "is not valid JSON"),
        # As the SDK encodes a string: JSON in JSON, the NUL only there once decoded.
        (HPS, r'{"blob": "\"a\\u0000b\""}', "blob: holds a control character"),
        (HPS, b"\xff\xfe{}", "cannot be read"),
        (
            RC,
            '{"hosts": ["algo-1"], "current_host": "algo-1"' + " " * (5 << 20) + "}",
            "larger than",
        ),
        (IDC, '{"train": {"TrainingInputMode": "File"}', "is not valid JSON"),
    ],
    ids=["deep-json", "nul-escaped", "nul-raw", "nul-sdk-encoded", "not-utf8", "huge", "truncated"],
)
def test_config_files_that_no_parser_should_trust_are_refused(tmp_path, file, content, message):
    ml = tree(tmp_path, hps=PROGRAM)
    path = ml / "input" / "config" / file
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    refused(tmp_path, message)


def test_a_config_file_that_is_a_directory_is_refused(tmp_path):
    ml = tree(tmp_path, hps=PROGRAM)
    (ml / "input" / "config" / HPS).unlink()
    (ml / "input" / "config" / HPS).mkdir()
    refused(tmp_path, f"{HPS} is not a file")


def test_several_hosts_outside_the_images_container_write_no_ssh_set_up(tmp_path):
    tree(tmp_path, hosts=["algo-1", "algo-2"], hps=PROGRAM)
    refused(tmp_path, "runs only in the image's container")
    assert list((tmp_path / "home").iterdir()) == []


def test_sigterm_ends_the_job_with_the_failure_file_and_leaves_nothing_running(tmp_path):
    ml = tree(tmp_path, hps=hp(sagemaker_program="wait.py"))
    pidfile = tmp_path / "ml" / "pid"
    (ml / "code" / "wait.py").write_text(
        f"import os, time\nopen({str(pidfile)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(ROOT / "entrypoint"),
        HOME=str(tmp_path / "home"),
        SAGEMAKER_BASE_DIR=str(ml),
        BYOC_TERM_GRACE="5",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "byoc.train"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        wait_until(lambda: pidfile.exists() and pidfile.read_text(), 60, what="program up")
        child = int(pidfile.read_text())
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, out
    assert (ml / "output" / "failure").read_text().startswith("Stopped by SIGTERM")
    assert "Traceback" not in out
    wait_until(lambda: ended(child), 30, what="gone")
