"""hostkit/k8s_sim.py's pure parts: what each engine derives from the rendered overlays (names,
hostfiles, variables, key modes), Kubernetes' command/args semantics, and what it refuses. The
runs themselves are tests/container/test_k8s_sim.py."""

from __future__ import annotations

import pytest

from hostkit import HostError, k8s_sim, k8s_validate

OVERLAYS = k8s_validate.OVERLAYS_DIR


def planned(engine: str, overlay: str | None = None, workers: int = 2) -> k8s_sim.Job:
    objects = k8s_validate.render(OVERLAYS / (overlay or f"{engine}-cpu"))
    return k8s_sim.plan(engine, objects, workers)


def test_mpijob_is_laid_out_as_the_operator_lays_it_out():
    job = planned("mpijob")
    assert [p.name for p in job.workers] == ["pytorch-horovod-worker-0", "pytorch-horovod-worker-1"]
    assert job.launcher_files["/etc/mpi/hostfile"] == (
        "pytorch-horovod-worker-0.pytorch-horovod.default.svc slots=1\n"
        "pytorch-horovod-worker-1.pytorch-horovod.default.svc slots=1\n"
    )
    env = job.launcher.env
    assert env["OMPI_MCA_orte_keep_fqdn_hostnames"] == "true"
    assert env["OMPI_MCA_orte_default_hostfile"] == "/etc/mpi/hostfile"
    assert env["OMPI_MCA_plm_rsh_args"] == "-o ConnectionAttempts=10"
    assert job.key_dir == "/root/.ssh" and set(job.key_modes.values()) == {0o600}
    assert job.key_type == ("ecdsa", "521")
    # The worker's command is the YAML's, with Kubernetes' meaning: command replaces ENTRYPOINT.
    assert k8s_sim.docker_args(job.workers[0]) == (["--entrypoint", "/usr/sbin/sshd"], ["-De"])
    assert job.workers[0].ready_port() == 22
    assert "pytorch-horovod-worker-1.pytorch-horovod.default.svc" in job.workers[1].aliases


def test_mpijob_nonroot_keys_are_0644_in_the_users_home_and_sshd_listens_on_2222():
    job = planned("mpijob", "mpijob-cpu-nonroot")
    assert job.key_dir == "/home/mpiuser/.ssh" and set(job.key_modes.values()) == {0o644}
    assert job.workers[0].security() == (1000, 1000, 1000)
    assert k8s_sim.docker_args(job.workers[0])[1] == ["-De", "-p", "2222"]
    assert job.workers[0].ready_port() == 2222


def test_trainer_puts_the_trainjobs_command_in_the_runtimes_launcher():
    job = planned("trainer")
    assert [p.name for p in job.workers] == ["pytorch-horovod-node-0-0", "pytorch-horovod-node-0-1"]
    assert job.launcher.name == "pytorch-horovod-launcher-0-0"
    entry, args = k8s_sim.docker_args(job.launcher)
    assert entry == ["--entrypoint", "horovodrun"] and "/etc/mpi/hostfile" in args
    assert job.launcher_files["/etc/mpi/hostfile"].splitlines() == [
        "pytorch-horovod-node-0-0.pytorch-horovod slots=1",
        "pytorch-horovod-node-0-1.pytorch-horovod slots=1",
    ]
    assert job.key_modes == {"id_rsa": 0o640, "id_rsa.pub": 0o644, "authorized_keys": 0o644}


def test_volcano_writes_the_svc_and_ssh_plugins_files_and_mpi_host():
    job = planned("volcano", workers=3)
    hosts = [f"pytorch-horovod-worker-{i}.pytorch-horovod" for i in range(3)]
    assert job.all_files["/etc/volcano/worker.host"] == "\n".join(hosts)
    assert job.launcher.env["MPI_HOST"] == ",".join(hosts)
    assert job.workers[0].env["VC_WORKER_NUM"] == "3"
    assert job.workers[0].env["VC_LAUNCHER_HOSTS"] == "pytorch-horovod-launcher-0.pytorch-horovod"
    assert "StrictHostKeyChecking no" in job.ssh_config and job.key_type == ("rsa", "2048")


@pytest.mark.parametrize("overlay", ["mpijob-gpu", "trainer-gpu-efa", "volcano-gpu"])
def test_devices_are_refused_not_faked(overlay):
    engine = overlay.split("-")[0]
    with pytest.raises(HostError, match="not simulated"):
        planned(engine, overlay)


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("--nnodes=$(WORLD_SIZE)", {"WORLD_SIZE": "2"}, "--nnodes=2"),
        ("$(UNKNOWN)", {}, "$(UNKNOWN)"),
        ("$$(WORLD_SIZE)", {"WORLD_SIZE": "2"}, "$(WORLD_SIZE)"),
    ],
)
def test_variable_references_expand_as_kubernetes_expands_them(text, env, expected):
    assert k8s_sim.expand(text, env) == expected


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--engine", "mpijob", "--workers", "0"], "--workers must be 1 to"),
        (["--engine", "mpijob", "--kill-worker", "2"], "--kill-worker must name a worker"),
        (["--engine", "mpijob", "--label", "a b"], "--label"),
        (["--engine", "mpijob", "--timeout", "1"], "--timeout"),
        (["--engine", "k8s"], "invalid choice"),
    ],
)
def test_bad_arguments_exit_2_before_anything_is_made(argv, says, capsys, monkeypatch):
    monkeypatch.setattr(k8s_sim, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        k8s_sim.main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_an_overlay_that_does_not_validate_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(k8s_sim, "run", lambda *a, **k: pytest.fail("ran"))
    assert k8s_sim.main(["--engine", "mpijob", "--overlay", str(tmp_path)]) == 1
    assert "no kustomization.yaml" in capsys.readouterr().err


def test_what_docker_cannot_give_or_should_not_is_refused():
    objects = k8s_validate.render(OVERLAYS / "mpijob-cpu")
    worker = objects_of(objects, "MPIJob")["spec"]["mpiReplicaSpecs"]["Worker"]
    worker["template"]["spec"]["containers"][0]["securityContext"] = {
        "capabilities": {"add": ["SYS_ADMIN"]}
    }
    with pytest.raises(HostError, match="SYS_ADMIN"):
        k8s_sim.plan("mpijob", objects, 2)


@pytest.mark.parametrize("args", [["--bad"], ["--master"], [3]])
def test_volcano_plugin_arguments_must_be_key_value(args):
    objects = k8s_validate.render(OVERLAYS / "volcano-cpu")
    objects_of(objects, "Job")["spec"]["plugins"]["mpi"] = args
    with pytest.raises(HostError, match="not --key=value"):
        k8s_sim.plan("volcano", objects, 2)


def objects_of(objects: list[dict], kind: str) -> dict:
    return next(o for o in objects if o["kind"] == kind)


def test_an_option_for_an_image_and_a_non_root_user_are_refused(capsys, monkeypatch):
    monkeypatch.setattr(k8s_sim, "run", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit) as exc:
        k8s_sim.main(["--engine", "mpijob", "--image=--privileged"])
    assert exc.value.code == 2 and "not an image reference" in capsys.readouterr().err
    monkeypatch.setattr(k8s_sim.os, "geteuid", lambda: 1000)
    with pytest.raises(SystemExit) as exc:
        k8s_sim.main(["--engine", "mpijob"])
    assert exc.value.code == 2 and "as root" in capsys.readouterr().err


@pytest.mark.parametrize("engine", ["mpijob", "trainer", "volcano"])
def test_mpi_launchers_share_the_pods_processes_so_pause_is_pid_1(engine):
    # The command replaces byoc-init: without this the launcher would be PID 1, and SIGTERM
    # (kubectl delete) would wait out the grace period; the simulation gives it Docker's --init.
    job = planned(engine)
    assert job.launcher.spec.get("shareProcessNamespace") is True


def test_elastic_mpijob_has_the_operators_configmap_directory_and_discover_script():
    job = planned("mpijob", "mpijob-elastic-cpu")
    assert job.config_dir == "/etc/mpi"
    assert "/etc/mpi/hostfile" in job.launcher_files
    assert job.launcher.env["BYOC_DISCOVER_COMMAND"] == "/etc/mpi/discover_hosts.sh"
    # A worker added mid-job is the operator's next index, from the same template.
    added = job.new_worker(2)
    assert added.name == "pytorch-horovod-worker-2"
    assert added.env["K_MPI_JOB_ROLE"] == "worker"
    assert added.container is not job.workers[0].container
    # As the operator writes it: sorted pod names, <pod>.<job>.<ns>.svc, no slots.
    script = k8s_sim.discover_hosts_script(job, [added, job.workers[0]])
    assert script == (
        "#!/bin/sh\n"
        "echo pytorch-horovod-worker-0.pytorch-horovod.default.svc\n"
        "echo pytorch-horovod-worker-2.pytorch-horovod.default.svc\n"
    )
    job.launcher_as_worker = True
    assert k8s_sim.discover_hosts_script(job, [])[10:].startswith(
        "echo pytorch-horovod-launcher.pytorch-horovod.default.svc"
    )


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--engine", "trainer", "--add-workers", "1"], "only the mpijob engine"),
        (["--engine", "mpijob", "--add-workers", "7"], "--add-workers"),
        (["--engine", "mpijob", "--kill-worker", "2"], "--kill-worker must name a worker, 0 to 1"),
        (["--engine", "mpijob", "--kill-worker", "0", "--kill-when", "("], "--kill-when"),
        (["--engine", "mpijob", "--configmap-delay", "-1"], "--configmap-delay"),
        (["--engine", "mpijob", "--kill-when", "x"], "--kill-when needs --kill-worker"),
        (["--engine", "mpijob", "--add-when", "x"], "--add-when needs --add-workers"),
        (["--engine", "mpijob", "--add-workers", "1", "--kill-worker", "0"], "needs --kill-when"),
    ],
)
def test_bad_scenario_options_exit_2_naming_them(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        k8s_sim.main(argv)
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
