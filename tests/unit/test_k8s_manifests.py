"""deploy/kubernetes: every overlay rendered and validated against the pinned CRDs, the roles the
image plays in each engine's objects, and broken manifests that must fail (hostkit/k8s_validate.py).
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from hostkit import k8s_validate as kv

EXAMPLES = kv.ROOT / "docker" / "examples"
IMAGE_EXAMPLES = "/opt/byoc/examples/"
OVERLAYS = kv.overlays()
OVERLAY_IDS = [p.name for p in OVERLAYS]
MPI_OVERLAYS = [p for p in OVERLAYS if "torch" not in p.name]
TORCH_OVERLAYS = [p for p in OVERLAYS if "torch" in p.name]
NONROOT_HOME_SSH = "/home/mpiuser/.ssh"


@pytest.fixture(scope="module")
def kinds():
    return kv.load_crds()


@pytest.fixture(scope="module")
def rendered():
    return {p.name: kv.render(p) for p in OVERLAYS}


def one(objects, kind):
    found = [o for o in objects if o["kind"] == kind]
    assert len(found) == 1, f"expected one {kind}, got {len(found)}"
    return found[0]


def option(args, name):
    """The value of `name` in args, given as `name value` or `name=value`; None if absent."""
    for i, arg in enumerate(args):
        if arg == name:
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def pod_of_volcano_task(job, task):
    return next(t for t in job["spec"]["tasks"] if t["name"] == task)["template"]["spec"]


def pod_of_rjob(runtime, name):
    rjobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    return next(r for r in rjobs if r["name"] == name)["template"]["spec"]["template"]["spec"]


def mpi_roles(objects):
    """What each engine's objects make of the two roles: the worker pods (sshd, the ranks) and
    the launcher (horovodrun or mpirun with the engine's hostfile)."""
    kinds = {o["kind"] for o in objects}
    if "MPIJob" in kinds:
        job = one(objects, "MPIJob")
        spec = job["spec"]
        worker_pod = spec["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        launcher_pod = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        launcher = launcher_pod["containers"][0]
        return {
            "workers": spec["mpiReplicaSpecs"]["Worker"]["replicas"],
            "slots": spec["slotsPerWorker"],
            "worker_pod": worker_pod,
            "launcher_pod": launcher_pod,
            "launcher_cmd": launcher["command"] + launcher["args"],
            "hostfile": "/etc/mpi/hostfile",
            "ssh_dir": spec["sshAuthMountPath"],
        }
    if "TrainJob" in kinds:
        runtime, trainjob = one(objects, "ClusterTrainingRuntime"), one(objects, "TrainJob")
        policy = runtime["spec"]["mlPolicy"]
        trainer = trainjob["spec"]["trainer"]
        # Trainer puts the TrainJob's command and args in the launcher's "node" container.
        launcher_pod = pod_of_rjob(runtime, "launcher")
        assert [c["name"] for c in launcher_pod["containers"]] == ["node"]
        return {
            "workers": trainer.get("numNodes", policy["numNodes"]),
            "slots": trainer.get("numProcPerNode", policy["mpi"]["numProcPerNode"]),
            "worker_pod": pod_of_rjob(runtime, "node"),
            "launcher_pod": launcher_pod,
            "launcher_cmd": trainer["command"] + trainer["args"],
            "hostfile": "/etc/mpi/hostfile",
            "ssh_dir": policy["mpi"]["sshAuthMountPath"],
        }
    job = one(objects, "Job")
    launcher_pod = pod_of_volcano_task(job, "launcher")
    launcher = launcher_pod["containers"][0]
    cmd = launcher["command"] + launcher["args"]
    ppr = re.fullmatch(r"ppr:(\d+):node", option(cmd, "--map-by"))
    assert ppr, "mpirun maps ranks by node: the Volcano hostfile has no slots"
    worker_task = next(t for t in job["spec"]["tasks"] if t["name"] == "worker")
    ssh_args = job["spec"]["plugins"]["ssh"]
    return {
        "workers": worker_task["replicas"],
        "slots": int(ppr.group(1)),
        "worker_pod": pod_of_volcano_task(job, "worker"),
        "launcher_pod": launcher_pod,
        "launcher_cmd": cmd,
        "hostfile": "/etc/volcano/worker.host",
        "ssh_dir": option(ssh_args, "--ssh-key-file-path") or "/root/.ssh",
    }


def example_options(script: str) -> set[str]:
    """The long options the example script (and the module it imports) declare."""
    text = (EXAMPLES / script).read_text() + (EXAMPLES / "synthetic_task.py").read_text()
    return set(re.findall(r'"(--[a-z0-9][a-z0-9_-]*)"', text))


def check_program(cmd, script, checkpoint_pod):
    """cmd runs an example the image has, with options it takes, checkpointing to a volume
    mounted in checkpoint_pod (the pod of global rank 0)."""
    program = next(a for a in cmd if a.startswith(IMAGE_EXAMPLES))
    assert program == IMAGE_EXAMPLES + script
    assert (EXAMPLES / script).is_file()
    known = example_options(script)
    rest = cmd[cmd.index(program) + 1 :]
    for arg in rest:
        if arg.startswith("--"):
            assert arg.split("=", 1)[0] in known, f"{script} has no option {arg}"
    ckpt = option(rest, "--checkpoint-dir")
    model = option(rest, "--model-dir")
    assert ckpt and model and model.startswith(ckpt + "/"), "checkpoints and model on the volume"
    claims = {
        v["name"]: v["persistentVolumeClaim"]["claimName"]
        for v in checkpoint_pod.get("volumes", [])
        if "persistentVolumeClaim" in v
    }
    mounts = {
        m["mountPath"]: m["name"]
        for c in checkpoint_pod["containers"]
        for m in c.get("volumeMounts", [])
    }
    assert mounts.get(ckpt) in claims, f"{ckpt} is not a PVC mount in rank 0's pod"


def check_pod_basics(pod, gpu):
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    for container in pod["containers"]:
        res = container.get("resources", {})
        assert {"cpu", "memory"} <= set(res.get("requests", {})), container["name"]
        assert "memory" in res.get("limits", {}), container["name"]
        assert ("nvidia.com/gpu" in res.get("limits", {})) == gpu, container["name"]
        shm = [m for m in container.get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
        assert len(shm) == 1, f"{container['name']}: /dev/shm"
        assert volumes[shm[0]["name"]]["emptyDir"]["medium"] == "Memory"


def images(objects):
    found = []

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("containers", "initContainers"):
                    found.extend(c["image"] for c in value)
                walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(objects)
    return found


# ----------------------------------------------------------------------------- the pinned CRDs


def test_crds_match_sources_table():
    assert kv.source_errors() == []
    assert len(kv.sources_table()) == 4


def test_crds_give_the_engines_kinds(kinds):
    assert {
        ("kubeflow.org", "v2beta1", "MPIJob"),
        ("trainer.kubeflow.org", "v1alpha1", "TrainJob"),
        ("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime"),
        ("batch.volcano.sh", "v1alpha1", "Job"),
    } <= set(kinds)
    assert not kinds[("trainer.kubeflow.org", "v1alpha1", "ClusterTrainingRuntime")].namespaced


def test_a_changed_crd_fails_the_sources_check(tmp_path):
    for path in kv.CRD_DIR.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    crd = tmp_path / "kubeflow.org_mpijobs.yaml"
    crd.write_bytes(crd.read_bytes() + b"\n")
    assert [e.split(":")[0] for e in kv.source_errors(tmp_path)] == [crd.name]


# ------------------------------------------------------------------------- render and validate


def test_every_engine_has_cpu_and_gpu_overlays():
    names = set(OVERLAY_IDS)
    for engine in ("mpijob", "trainer", "trainer-torch", "volcano", "volcano-torch"):
        assert {f"{engine}-cpu", f"{engine}-gpu"} <= names
    assert {"mpijob-gpu-efa", "trainer-gpu-efa", "volcano-gpu-efa", "mpijob-cpu-nonroot"} <= names


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_overlay_validates(overlay, rendered, kinds):
    objects = rendered[overlay.name]
    assert kv.validate_objects(objects, kinds) == []
    assert one(objects, "PersistentVolumeClaim")["spec"]["accessModes"] == ["ReadWriteMany"]
    flavor = "gpu" if "-gpu" in overlay.name else "cpu"
    assert set(images(objects)) == {f"pytorch-horovod:{flavor}"}


@pytest.mark.parametrize("overlay", OVERLAYS, ids=OVERLAY_IDS)
def test_renderer_matches_kustomize(overlay, rendered):
    command = kv.kustomize_command()
    if command is None:
        pytest.skip("no kustomize or kubectl on PATH to compare with")
    theirs = kv.render_kustomize(overlay, command)
    assert kv.canonical(theirs) == kv.canonical(rendered[overlay.name])


def test_cli_passes_on_the_overlays_and_fails_on_a_broken_one(tmp_path, capsys):
    assert kv.main([str(OVERLAYS[0])]) == 0
    broken = copy.deepcopy(kv.render(kv.OVERLAYS_DIR / "mpijob-cpu"))
    one(broken, "MPIJob")["spec"]["slotsPerWorker"] = "two"
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(broken))
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [all.yaml]\n"
    )
    assert kv.main([str(tmp_path)]) == 1
    assert "/spec/slotsPerWorker: 'two' is not of type 'integer'" in capsys.readouterr().out


# ------------------------------------------------------------------------ the roles, MPI engines


@pytest.mark.parametrize("overlay", MPI_OVERLAYS, ids=[p.name for p in MPI_OVERLAYS])
def test_mpi_roles(overlay, rendered):
    objects = rendered[overlay.name]
    roles = mpi_roles(objects)
    gpu = "-gpu" in overlay.name

    # Worker: sshd in the foreground with the mounted keys; Ready when sshd listens.
    worker_pod = roles["worker_pod"]
    (worker,) = worker_pod["containers"]
    assert worker["command"] == ["/usr/sbin/sshd"]
    assert worker["args"][0] == "-De"
    port = int(option(worker["args"], "-p") or 22)
    assert worker["readinessProbe"]["tcpSocket"]["port"] == port
    assert [p["containerPort"] for p in worker["ports"]] == [port]
    user = (worker_pod.get("securityContext") or {}).get("runAsUser", 0)
    if user != 0:
        assert port >= 1024, "a non-root sshd cannot bind a privileged port"
        assert roles["ssh_dir"] == NONROOT_HOME_SSH
    else:
        assert roles["ssh_dir"] == "/root/.ssh"
    check_pod_basics(worker_pod, gpu)

    # Launcher: horovodrun (mpirun on Volcano) with the engine's hostfile, ranks = hosts x slots.
    cmd = roles["launcher_cmd"]
    assert cmd[0] in ("horovodrun", "mpirun")
    elastic = option(cmd, "--host-discovery-script") is not None
    if elastic:
        check_elastic_launcher(cmd, roles, port)
    else:
        assert option(cmd, "--hostfile") == roles["hostfile"]
    assert int(option(cmd, "-np")) == roles["workers"] * roles["slots"]
    if cmd[0] == "horovodrun":
        assert int(option(cmd, "--ssh-port") or 22) == port
    else:
        assert port == 22  # mpirun's ssh uses the client's default port
    launcher_pod = roles["launcher_pod"]
    launcher_user = (launcher_pod.get("securityContext") or {}).get("runAsUser", 0)
    assert launcher_user == user, "launcher and workers log in as one user"
    launcher_res = launcher_pod["containers"][0].get("resources", {})
    assert "nvidia.com/gpu" not in launcher_res.get("limits", {})
    check_program(cmd, "train_elastic.py" if elastic else "train_synthetic.py", worker_pod)

    if "-efa" in overlay.name:
        assert worker["resources"]["limits"]["vpc.amazonaws.com/efa"] >= 1
        if user == 0:
            assert "IPC_LOCK" in worker["securityContext"]["capabilities"]["add"]


def check_elastic_launcher(cmd, roles, port):
    """Elastic horovodrun on the MPI Operator: byoc-discover-hosts runs the operator's own
    discover_hosts.sh (no slots in it) and probes the workers' sshd port."""
    assert cmd[0] == "horovodrun"
    assert option(cmd, "--host-discovery-script") == "byoc-discover-hosts"
    env = {e["name"]: e["value"] for e in roles["launcher_pod"]["containers"][0]["env"]}
    assert env["BYOC_DISCOVER_COMMAND"] == "/etc/mpi/discover_hosts.sh"
    assert int(env["BYOC_DISCOVER_SLOTS"]) == roles["slots"]
    assert int(env["BYOC_DISCOVER_PORT"]) == port
    low, start, high = (int(option(cmd, o)) for o in ("--min-np", "-np", "--max-np"))
    assert 1 <= low <= start <= high
    assert high % roles["slots"] == 0, "--max-np in whole workers"
    # A worker pod deleted and recreated under its name must be usable again.
    assert option(cmd, "--blacklist-cooldown-range") is not None


def test_mpijob_lifecycle(rendered):
    spec = one(rendered["mpijob-cpu"], "MPIJob")["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["runPolicy"]["cleanPodPolicy"] == "Running"
    assert spec["runLauncherAsWorker"] is False
    assert spec["mpiReplicaSpecs"]["Launcher"]["restartPolicy"] == "Never"


def test_trainer_mpi_lifecycle(rendered):
    runtime = one(rendered["trainer-cpu"], "ClusterTrainingRuntime")
    jobset = runtime["spec"]["template"]["spec"]
    assert [r["name"] for r in jobset["replicatedJobs"]] == ["node", "launcher"]
    assert jobset["replicatedJobs"][1]["dependsOn"] == [{"name": "node", "status": "Ready"}]
    assert jobset["successPolicy"] == {"operator": "All", "targetReplicatedJobs": ["launcher"]}
    assert runtime["spec"]["mlPolicy"]["mpi"]["runLauncherAsNode"] is False
    # The MPI plugin mounts keys and hostfile only into containers named "node".
    assert pod_of_rjob(runtime, "node")["containers"][0]["name"] == "node"


def test_volcano_lifecycle(rendered):
    job = one(rendered["volcano-cpu"], "Job")
    tasks = {t["name"]: t for t in job["spec"]["tasks"]}
    assert set(job["spec"]["plugins"]) == {"ssh", "svc", "mpi"}
    assert tasks["launcher"]["dependsOn"] == {"name": ["worker"]}
    assert tasks["worker"]["minAvailable"] == tasks["worker"]["replicas"]
    launcher_events = {p["event"]: p["action"] for p in tasks["launcher"]["policies"]}
    assert launcher_events == {"TaskCompleted": "CompleteJob", "PodFailed": "TerminateJob"}


# ---------------------------------------------------------------------- the roles, torchrun


@pytest.mark.parametrize("overlay", TORCH_OVERLAYS, ids=[p.name for p in TORCH_OVERLAYS])
def test_torchrun_roles(overlay, rendered):
    objects = rendered[overlay.name]
    gpu = "-gpu" in overlay.name
    if "trainer" in overlay.name:
        runtime, trainjob = one(objects, "ClusterTrainingRuntime"), one(objects, "TrainJob")
        assert "torch" in runtime["spec"]["mlPolicy"]
        trainer = trainjob["spec"]["trainer"]
        cmd = trainer["command"] + trainer["args"]
        # torchrun takes the nodes, rank and master from the PET_* variables Trainer sets.
        assert cmd[0] == "torchrun"
        assert trainer["numProcPerNode"] == 1
        pods = [pod_of_rjob(runtime, "node")]
    else:
        job = one(objects, "Job")
        assert "pytorch" in job["spec"]["plugins"]
        pods = [pod_of_volcano_task(job, t) for t in ("master", "worker")]
        commands = [p["containers"][0]["command"] + p["containers"][0]["args"] for p in pods]
        cmd = commands[0]
        assert cmd[0] == "torchrun"
        if "elastic" in overlay.name:
            check_volcano_torch_elastic(job, commands, pods)
            check_program(cmd, "train_ddp.py", pods[0])
            return
        assert commands[0] == commands[1]
        for name, var in (
            ("--nnodes", "WORLD_SIZE"),
            ("--node-rank", "RANK"),
            ("--master-addr", "MASTER_ADDR"),
            ("--master-port", "MASTER_PORT"),
        ):
            assert option(cmd, name) == f"$({var})"
    for pod in pods:
        check_pod_basics(pod, gpu)
    check_program(cmd, "train_ddp.py", pods[0])


def check_volcano_torch_elastic(job, commands, pods):
    """Elastic torchrun on Volcano: one c10d rendezvous hosted by the master, the same command
    everywhere else; a worker's failure leaves the job running, the master's ends it; every pod
    can be rank 0, so every pod mounts the checkpoints."""
    master, worker = commands

    def conf(cmd):
        return dict(kv.split("=", 1) for kv in option(cmd, "--rdzv-conf").split(","))

    assert conf(master).pop("is_host") == "true" and conf(worker).pop("is_host") == "false"
    assert {k: v for k, v in conf(master).items() if k != "is_host"} == {
        k: v for k, v in conf(worker).items() if k != "is_host"
    }
    without_conf = [[a for a in c if not a.startswith("--rdzv-conf=")] for c in commands]
    assert without_conf[0] == without_conf[1]
    assert option(master, "--rdzv-backend") == "c10d"
    assert option(master, "--rdzv-endpoint") == "$(MASTER_ADDR):$(MASTER_PORT)"
    assert option(master, "--node-rank") is None, "elastic nodes get their rank from c10d"
    low, high = (int(n) for n in option(master, "--nnodes").split(":"))
    replicas = sum(t["replicas"] for t in job["spec"]["tasks"])
    assert 1 <= low <= job["spec"]["minAvailable"] <= replicas <= high
    assert int(option(master, "--max-restarts")) >= 1
    assert float(option(master, "--pg-timeout")) > 0, "survivors must not wait torch's 30 min"
    # Job-level policies apply to every pod: a worker lost or an added one left pending must not
    # end the job; the master's own policies do.
    assert not job["spec"].get("policies"), job["spec"].get("policies")
    master_task = next(t for t in job["spec"]["tasks"] if t["name"] == "master")
    master_events = {p["event"]: p["action"] for p in master_task["policies"]}
    assert master_events["PodFailed"] == master_events["PodPending"] == "TerminateJob"
    for pod in pods:
        mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
        assert "/opt/ml/checkpoints" in mounts


# -------------------------------------------------------------- broken manifests must fail


def _mpijob(objs):
    return one(objs, "MPIJob")


def _worker_container(objs):
    return _mpijob(objs)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]


BROKEN = [
    # (overlay, what, mutation, a piece of the expected error)
    (
        "mpijob-cpu",
        "slots not an integer",
        lambda o: _mpijob(o)["spec"].update(slotsPerWorker="two"),
        "/spec/slotsPerWorker: 'two' is not of type 'integer'",
    ),
    (
        "mpijob-cpu",
        "unknown field in spec",
        lambda o: _mpijob(o)["spec"].update(slotPerWorker=1),
        "'slotPerWorker' was unexpected",
    ),
    (
        "mpijob-cpu",
        "missing required field",
        lambda o: _mpijob(o)["spec"].pop("mpiReplicaSpecs"),
        "'mpiReplicaSpecs' is a required property",
    ),
    (
        "mpijob-cpu",
        "unknown field in the pod template",
        lambda o: _worker_container(o).update(imagePullPolicyy="Always"),
        "containers/0: Additional properties are not allowed ('imagePullPolicyy'",
    ),
    (
        "mpijob-cpu",
        "two containers of one name",
        lambda o: _mpijob(o)["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"][
            "containers"
        ].append(copy.deepcopy(_worker_container(o))),
        "duplicate entries with name='worker'",
    ),
    (
        "mpijob-cpu",
        "not a quantity",
        lambda o: _worker_container(o)["resources"]["requests"].update(cpu="two"),
        "requests/cpu: 'two' does not match",
    ),
    (
        "mpijob-cpu",
        "int-or-string port of another type",
        lambda o: _worker_container(o)["readinessProbe"]["tcpSocket"].update(port=[22]),
        "tcpSocket/port: [22] is not valid under any of the given schemas",
    ),
    (
        "mpijob-cpu",
        "int32 overflow",
        lambda o: _mpijob(o)["spec"].update(slotsPerWorker=2**31),
        "is not a 'int32'",
    ),
    (
        "mpijob-cpu",
        "an enum the CRD lacks",
        lambda o: _mpijob(o)["spec"].update(launcherCreationPolicy="WaitForWorkers"),
        "launcherCreationPolicy 'WaitForWorkers'",
    ),
    (
        "mpijob-cpu",
        "a version the operator does not serve",
        lambda o: _mpijob(o).update(apiVersion="kubeflow.org/v1"),
        "kubeflow.org/v1 MPIJob: no pinned schema",
    ),
    (
        "mpijob-cpu",
        "a name that is no DNS name",
        lambda o: _mpijob(o)["metadata"].update(name="PyTorch_Horovod"),
        "not a DNS-1123 subdomain",
    ),
    (
        "mpijob-cpu",
        "a claim no object defines",
        lambda o: one(o, "PersistentVolumeClaim")["metadata"].update(name="other"),
        "claimName 'pytorch-horovod-checkpoints' is in no object",
    ),
    (
        "mpijob-cpu",
        "a PVC spec field of the wrong type",
        lambda o: one(o, "PersistentVolumeClaim")["spec"].update(accessModes="ReadWriteMany"),
        "/spec/accessModes: 'ReadWriteMany' is not of type 'array'",
    ),
    (
        "trainer-cpu",
        "a TrainJob without runtimeRef",
        lambda o: one(o, "TrainJob")["spec"].pop("runtimeRef"),
        "'runtimeRef' is a required property",
    ),
    (
        "trainer-cpu",
        "a TrainJob on a runtime the overlay lacks",
        lambda o: one(o, "TrainJob")["spec"]["runtimeRef"].update(name="mpi"),
        "runtimeRef 'mpi' is in no object",
    ),
    (
        "trainer-cpu",
        "a dependsOn status JobSet does not have",
        lambda o: one(o, "ClusterTrainingRuntime")["spec"]["template"]["spec"]["replicatedJobs"][1][
            "dependsOn"
        ][0].update(status="Running"),
        "'Running' is not one of ['Ready', 'Complete']",
    ),
    (
        "trainer-cpu",
        "a namespace on a cluster-scoped runtime",
        lambda o: one(o, "ClusterTrainingRuntime")["metadata"].update(namespace="default"),
        "set on a cluster-scoped kind",
    ),
    (
        "volcano-cpu",
        "a policy event Volcano does not have",
        lambda o: one(o, "Job")["spec"]["policies"][0].update(event="PodCrashed"),
        "'PodCrashed' is not one of",
    ),
    (
        "volcano-cpu",
        "a policy action Volcano does not have",
        lambda o: one(o, "Job")["spec"]["policies"][0].update(action="FailJob"),
        "unknown policy action 'FailJob'",
    ),
    (
        "volcano-cpu",
        "one event in two policies",
        lambda o: one(o, "Job")["spec"]["policies"].append(
            {"event": "PodFailed", "action": "RestartJob"}
        ),
        "an event in more than one policy",
    ),
    (
        "volcano-cpu",
        "an mpi plugin master task that does not exist",
        lambda o: one(o, "Job")["spec"]["plugins"].update(mpi=["--master=mpimaster"]),
        "mpi plugin master task 'mpimaster' does not exist",
    ),
]


@pytest.mark.parametrize(
    ("overlay", "mutation", "expected"),
    [(b[0], b[2], b[3]) for b in BROKEN],
    ids=[b[1] for b in BROKEN],
)
def test_broken_manifest_fails(overlay, mutation, expected, rendered, kinds):
    objects = copy.deepcopy(rendered[overlay])
    mutation(objects)
    errors = kv.validate_objects(objects, kinds)
    assert any(expected in e for e in errors), errors


# ----------------------------------------------------------------------------- the renderer


def write_kustomization(directory: Path, text: str, **files: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n" + text
    )
    for name, content in files.items():
        (directory / name.replace("__", ".")).write_text(content)
    return directory


CONFIGMAP = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  k: v\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("namePrefix: x-\nresources: [cm.yaml]\n", "does not apply: ['namePrefix']"),
        ("resources: [../cm.yaml]\n", "outside the kustomization's directory"),
        ("resources: [cm.yaml, cm.yaml]\n", "added twice"),
        ("resources: [https://example.com/x.yaml]\n", "not offline"),
        (
            "resources: [cm.yaml]\npatches:\n- target: {kind: ConfigMap, name: a}\n"
            "  patch: |-\n    data: {k: w}\n",
            "strategic merge patches",
        ),
        (
            "resources: [cm.yaml]\npatches:\n- target: {kind: ConfigMap, name: b}\n"
            "  patch: |-\n    - {op: replace, path: /data/k, value: w}\n",
            "matches no object",
        ),
        (
            "resources: [cm.yaml]\npatches:\n- target: {kind: ConfigMap, name: a}\n"
            "  patch: |-\n    - {op: replace, path: /data/missing, value: w}\n",
            "ConfigMap",
        ),
    ],
    ids=["unknown field", "outside root", "twice", "remote", "strategic", "no match", "bad op"],
)
def test_renderer_refuses(tmp_path, text, expected):
    (tmp_path / "cm.yaml").write_text(CONFIGMAP)
    directory = write_kustomization(tmp_path / "k", text, cm__yaml=CONFIGMAP)
    with pytest.raises(kv.RenderError, match=re.escape(expected)):
        kv.render(directory)


def test_renderer_applies_patches_and_images(tmp_path):
    job = (
        "apiVersion: batch.volcano.sh/v1alpha1\nkind: Job\nmetadata: {name: j}\nspec:\n"
        "  tasks:\n  - name: t\n    template:\n      spec:\n"
        "        containers: [{name: c, image: 'pytorch-horovod:old'}]\n"
        "        initContainers: [{name: i, image: 'reg:5000/other'}]\n"
    )
    base = write_kustomization(tmp_path / "base", "resources: [job.yaml]\n", job__yaml=job)
    overlay = write_kustomization(
        tmp_path / "overlay",
        "resources: [../base]\nimages:\n- {name: pytorch-horovod, newName: r/p, newTag: gpu}\n"
        "- {name: reg:5000/other, digest: 'sha256:00'}\npatches:\n- path: p.yaml\n"
        "  target: {group: batch.volcano.sh, kind: Jo.*}\n",
        p__yaml="- {op: add, path: /spec/minAvailable, value: 1}\n",
    )
    assert base.is_dir()
    (obj,) = kv.render(overlay)
    pod = obj["spec"]["tasks"][0]["template"]["spec"]
    assert pod["containers"][0]["image"] == "r/p:gpu"
    assert pod["initContainers"][0]["image"] == "reg:5000/other@sha256:00"
    assert obj["spec"]["minAvailable"] == 1
