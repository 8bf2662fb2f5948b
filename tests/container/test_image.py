"""The built image: Horovod against torch, the libraries, PID 1, and what must not be in it."""

from __future__ import annotations

import json
import re
import time

import pytest

from hostkit import dockerfile
from tests.container.support import ROOT, rank_text
from tests.helpers import wait_until


def test_check_build_lists_frameworks_and_controllers(containers, image):
    code, out = containers.run(["horovodrun", "--check-build"], timeout=120)
    assert code == 0, out
    checked = {
        line.strip()[4:].strip() for line in out.splitlines() if line.strip().startswith("[X]")
    }
    assert {"PyTorch", "MPI", "Gloo"} <= checked, out
    flavor = image.labels.get("io.github.pytorch-horovod.flavor")
    assert ("NCCL" in checked) == (flavor == "gpu"), out


@pytest.mark.timing  # ranks' interleaved output
@pytest.mark.parametrize("controller", ["--gloo", "--mpi"])
def test_horovodrun_two_processes_allreduce_and_optimizer_step(
    containers, scripts_volume, controller
):
    code, out = containers.run(
        [
            "horovodrun",
            controller,
            "-np",
            "2",
            "-H",
            "localhost:2",
            "python",
            "/tests/allreduce.py",
        ],
        volumes=scripts_volume,
        timeout=300,
    )
    assert code == 0, out
    results = sorted(
        re.findall(r"RESULT (rank=\d+ size=\d+ sum=[\d.]+ weight=-?[\d.]+)", rank_text(out))
    )
    assert results == [
        "rank=0 size=2 sum=3.0 weight=-1.5",
        "rank=1 size=2 sum=3.0 weight=-1.5",
    ], out


def test_listed_packages_import_at_the_pinned_versions(containers):
    code, out = containers.run(
        [
            "python",
            "-c",
            "import json, boto3, horovod, horovod.torch, numpy, sagemaker_training, smdebug, "
            "torch, torchvision, matplotlib; print(json.dumps({'torch': torch.__version__, "
            "'torchvision': torchvision.__version__, 'horovod': horovod.__version__, "
            "'matplotlib': matplotlib.__version__}))",
        ],
        timeout=120,
    )
    assert code == 0, out
    versions = json.loads(out.strip().splitlines()[-1])
    assert versions["torch"].split("+")[0] == dockerfile.arg("TORCH_VERSION")
    assert versions["torchvision"].split("+")[0] == dockerfile.arg("TORCHVISION_VERSION")
    assert versions["horovod"] == dockerfile.arg("HOROVOD_VERSION")
    pins = (ROOT / "docker" / "requirements.in").read_text()  # the pins the lock hashes
    assert f"matplotlib=={versions['matplotlib']}" in pins.splitlines()


def test_torch_and_horovod_import_from_the_images_bytecode(containers, scripts_volume):
    """pip's bytecode ships (Dockerfile): a fresh container, even as a user who cannot write
    /opt/venv, imports torch and Horovod from .pyc files instead of compiling ~760 modules."""
    code, out = containers.run(
        ["python", "/tests/bytecode_check.py"], user="1000:1000", volumes=scripts_volume
    )
    assert code == 0, out
    m = re.search(r"MODULES (\d+) WITHOUT-PYC (\d+)", out)
    assert m and int(m.group(1)) > 500, out
    assert m.group(2) == "0", out


def test_pip_check_passes(containers):
    code, out = containers.run(["pip", "check"], timeout=120)
    assert code == 0, out


def test_smdebug_hook_saves_what_the_trial_api_reads_back(containers, scripts_volume):
    code, out = containers.run(["python", "/tests/smdebug_roundtrip.py"], volumes=scripts_volume)
    assert code == 0, out
    assert "SMDEBUG_OK" in out, out


def test_sagemaker_training_environment_loads_a_fake_opt_ml(containers, scripts_volume):
    code, out = containers.run(
        ["python", "/tests/sm_environment.py"],
        volumes=scripts_volume,
        environment={"SAGEMAKER_BASE_DIR": "/tmp/fake-ml"},
    )
    assert code == 0, out
    assert "SM_ENVIRONMENT_OK algo-2" in out, out


def test_bash_command_runs(containers):
    assert containers.run(["bash", "-c", "echo ok"], timeout=60) == (0, "ok\n")


def test_exit_code_is_passed_through(containers):
    assert containers.run(["bash", "-c", "exit 3"], timeout=60)[0] == 3


@pytest.mark.timing  # a time bound
def test_docker_stop_is_prompt_and_forwards_sigterm(containers):
    c = containers.start(
        ["bash", "-c", "trap 'echo got-term; exit 0' TERM; echo ready; sleep 300 & wait"]
    )
    wait_until(lambda: b"ready" in c.logs(), timeout=60, what="container ready")
    start = time.monotonic()
    c.stop(timeout=30)
    elapsed = time.monotonic() - start
    c.reload()
    assert elapsed < 5, f"docker stop took {elapsed:.1f} s: SIGTERM was not forwarded"
    assert c.attrs["State"]["ExitCode"] == 0
    assert b"got-term" in c.logs()


def test_ddp_example_ends_flushed_and_without_the_interpreter_teardown(containers):
    """train_ddp.py's last call (synthetic_task.exit_after_success, pytorch/pytorch#190489):
    what was printed still arrives with stdout a pipe, the exit code is 0, and no teardown
    runs (an atexit handler stays silent): a Gloo thread cannot abort the process in it."""
    script = (
        "import atexit, sys; sys.path.insert(0, '/opt/byoc/examples'); "
        "import synthetic_task as task; atexit.register(print, 'teardown ran'); "
        "print('buffered', end=''); sys.stderr.write(' and err'); task.exit_after_success()"
    )
    # Without the image's PYTHONUNBUFFERED, so that stdout to a pipe is block-buffered.
    code, out = containers.run(
        ["env", "-u", "PYTHONUNBUFFERED", "python", "-c", script], timeout=120
    )
    assert code == 0, out
    assert "buffered" in out and "and err" in out, out
    assert "teardown ran" not in out, out


def test_pid1_reaps_orphans(containers):
    # Orphans re-parented to PID 1 exit; none may stay a zombie.
    script = (
        "for i in 1 2 3 4 5; do (sleep 0.1 &); done; sleep 2; ps -eo stat= | grep -c '^Z' || true"
    )
    code, out = containers.run(["bash", "-c", script], timeout=60)
    assert code == 0, out
    assert out.strip().splitlines()[-1] == "0", out


def test_openmpi_is_configured_for_containers(containers):
    code, out = containers.run(
        [
            "bash",
            "-c",
            "ompi_info --param btl vader --level 9 --parsable | grep single_copy_mechanism:value; "
            "ompi_info --param mpi all --level 9 --parsable | grep yield_when_idle:value; "
            "env | grep ^OMPI_ALLOW",
        ],
        timeout=60,
    )
    assert code == 0, out
    assert "single_copy_mechanism:value:none" in out, out
    assert "mpi_yield_when_idle:value:true" in out, out  # waiting ranks give their core away
    assert "OMPI_ALLOW_RUN_AS_ROOT=1" in out and "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1" in out, out


def test_runtime_has_what_pytorch_compiles_with_and_no_more(containers):
    """torch.compile's C++ backend and cpp_extension call g++ (c++), through ninja; inductor's
    code and Triton's launcher include Python.h (docs/pytorch.md). Build tools beyond those
    (make, cmake, nvcc: CUDA sources, docs/pytorch.md) stay in the builder."""
    script = (
        "for c in gcc g++ c++ ninja; do command -v $c >/dev/null || echo MISSING-$c; done; "
        "python -c 'import sysconfig, os; "
        'print(os.path.isfile(sysconfig.get_path("include") + "/Python.h"))\'; '
        "for c in make cmake nvcc; do command -v $c && echo FOUND-$c; done; "
        "echo checked"
    )
    code, out = containers.run(["bash", "-c", script], timeout=60)
    assert code == 0, out
    assert "MISSING" not in out and "FOUND" not in out, out
    assert out.strip().splitlines()[-2:] == ["True", "checked"], out


def test_runtime_has_no_pip_cache_no_baked_keys(containers):
    script = (
        # The cache mount's empty mount point may remain; no file may.
        "find /root/.cache -type f 2>/dev/null | grep -q . && echo FOUND-cache-files; "
        "ls /etc/ssh/ssh_host_* 2>/dev/null && echo FOUND-host-keys; "
        "ls /root/.ssh/id_* 2>/dev/null && echo FOUND-private-key; "
        "ls /run/secrets 2>/dev/null | grep . && echo FOUND-secret; "
        "echo checked"
    )
    code, out = containers.run(["bash", "-c", script], timeout=60)
    assert code == 0, out
    assert "FOUND" not in out, out
    assert out.strip().endswith("checked"), out


def test_no_ca_bundle_or_secret_in_the_image_history(client, image):
    for layer in client.api.history(image.id):
        created_by = layer.get("CreatedBy", "")
        assert "BEGIN CERTIFICATE" not in created_by
        assert "PIP_CERT=/" not in created_by.replace("PIP_CERT=/run/secrets/ca", ""), created_by


def test_oci_labels_are_set(image):
    labels = image.labels
    for key in ("version", "revision", "source"):
        value = labels.get(f"org.opencontainers.image.{key}")
        assert value and value != "unknown", (key, labels)
    assert labels["io.github.pytorch-horovod.torch"] == dockerfile.arg("TORCH_VERSION")
    assert labels["io.github.pytorch-horovod.horovod"] == dockerfile.arg("HOROVOD_VERSION")


def test_entrypoint_is_exec_form_and_our_pid1(image):
    config = image.attrs["Config"]
    assert config["Entrypoint"] == ["/opt/venv/bin/byoc-init"]


def test_gloo_rendezvous_clears_every_scope_whatever_the_order(containers, scripts_volume):
    """Our patch to horovodrun's rendezvous server: a scope completed by one rank no longer
    forgets the others' progress, so no old address survives into the next hvd.init()
    (unpatched, local_localhost keeps both keys and the next init can abort)."""
    code, out = containers.run(
        ["python", "/tests/rendezvous_scopes.py"], volumes=scripts_volume, timeout=120
    )
    assert code == 0, out
    assert json.loads(out.strip().splitlines()[-1]) == {}, out
