#!/usr/bin/env python3
"""Run a deploy/kubernetes overlay the way its engine would, with Docker on this machine.

    python3 -m hostkit.k8s_sim --engine mpijob|trainer|volcano [--overlay DIR] [--workers 2]
        [--image pytorch-horovod:cpu] [--extra-arg ARG ...] [--kill-worker I [--kill-when RE]]
        [--add-workers N [--add-when RE]] [--configmap-delay 5] [--timeout 600]

The overlay is rendered (hostkit/k8s_validate.py: kustomize when one is installed, else its
checked subset) and its pod templates are run as the engine runs them, reading every command,
argument, port, user, volume and variable from the YAML, not from here:
  - mpijob (Kubeflow MPI Operator v2beta1): Secret keys (ECDSA P-521, files id_rsa, id_rsa.pub,
    authorized_keys; mode 0600 under /root/.ssh, else 0644) at sshAuthMountPath on launcher and
    workers; /etc/mpi/hostfile ("<job>-worker-<i>.<job>.<ns>.svc slots=<slotsPerWorker>") and
    the OMPI_MCA_* variables on the launcher; the launcher starts when every worker is Ready
    (its readinessProbe); workers are removed when the launcher ends (cleanPodPolicy).
  - trainer (Kubeflow Trainer v2, MPI policy): the TrainJob's command/args in the runtime's
    launcher; keys with the plugin's modes (id_rsa 0640, group fsGroup); hostfile lines
    "<job>-node-0-<i>.<job> slots=<numProcPerNode>"; the JobSet's dependsOn node Ready.
  - volcano (Volcano Job with the ssh, svc and mpi plugins): RSA keys and the ssh plugin's
    `config`; /etc/volcano/<task>.host, VC_<TASK>_HOSTS/_NUM, MPI_HOST; dependsOn with
    minAvailable; TaskCompleted -> CompleteJob.
Pods are containers on a private network, named and reachable as the engine names them
(hostname <pod>, DNS <pod>.<job>[.<ns>.svc[.cluster.local]]); the Secret is a read-only mount
of a world-writable directory, as a Secret volume is; a PersistentVolumeClaim is a directory
shared by the pods; an emptyDir at /dev/shm is --shm-size. What is not simulated: scheduling,
resources (requests are not enforced), GPUs and EFA devices (gpu/efa overlays are refused),
the engines' retries and webhooks.

--kill-worker I kills worker I once the launcher's output shows a rank took its first step (a
node lost mid-job), or once it matches --kill-when (needed with --add-workers, and then looked
for after the add); a static job must then end on its own, an elastic one go on without it.
--add-workers N (mpijob) raises Worker.replicas by N at the first step (or --add-when): the
operator creates the pods at once, without waiting for them, and rewrites the hostfile.
An MPIJob's launcher has the operator's ConfigMap as a directory at /etc/mpi: the hostfile and
discover_hosts.sh ("#!/bin/sh", then `echo <pod>.<job>.<ns>.svc` per Running worker, sorted;
the launcher first when runLauncherAsWorker), rewritten whenever the running workers change,
--configmap-delay seconds later (the operator's update plus the kubelet's sync), atomically.

Exit status: the launcher's, as the engine takes it for the job's result; 124 past --timeout;
2 bad input; 1 when a step fails (a worker not Ready in time, Docker refusing). Everything it
made is removed in every case.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import yaml  # noqa: E402

from hostkit import HostError, Teller, k8s_validate
from hostkit.docker import TIMED_OUT, Docker

ENGINES = ("mpijob", "trainer", "volcano")
DEFAULT_OVERLAY = {e: k8s_validate.OVERLAYS_DIR / f"{e}-cpu" for e in ENGINES}
MAX_WORKERS = 8
# Capabilities a pod may add here (memlock for EFA's registered memory); anything else refused.
ALLOWED_CAPS = {"IPC_LOCK"}
IMAGE_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")
SIZE = re.compile(r"(\d{1,12})(Ki|Mi|Gi)?")
FIRST_STEP = re.compile(r"rank \d+: first step done")
# The example's first line per rank: "rank 0/2 local_rank 0 on <hostname> ...".
RANK_LINE = re.compile(r"rank (\d+)/(\d+) local_rank \d+ on (\S+)")
VAR_REF = re.compile(r"\$\((\w+)\)|\$\$")


say = Teller("k8s-sim")


# --- what the engine makes (pure: read from the rendered objects) ----------------------------


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' $(VAR) expansion in command and args: known names replaced, $$ -> $,
    unknown references left as they are."""

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return VAR_REF.sub(one, text)


def container_env(container: dict) -> dict[str, str]:
    env = {}
    for item in container.get("env") or []:
        if "valueFrom" in item:
            raise HostError(f"env {item['name']}: valueFrom is not simulated")
        env[item["name"]] = str(item.get("value", ""))
    return env


class Pod:
    """One pod to run: its template's first container, as the engine completes it."""

    def __init__(self, name: str, subdomain: str, namespace: str, spec: dict):
        self.name = name
        self.spec = spec
        self.container = spec["containers"][0]
        self.aliases = [
            f"{name}.{subdomain}",
            f"{name}.{subdomain}.{namespace}.svc",
            f"{name}.{subdomain}.{namespace}.svc.cluster.local",
        ]
        self.env = container_env(self.container)
        self.mounts: list[tuple[Path, str, bool]] = []  # host path, container path, read-only
        # From its volumes (take_volumes): --shm-size, and where the shared claim is mounted.
        self.shm = "64m"  # the runtime's default, as in a pod without the emptyDir
        self.claims: list[tuple[str, bool]] = []  # container path, read-only

    def security(self) -> tuple[int | None, int | None, int | None]:
        pod = self.spec.get("securityContext") or {}
        own = self.container.get("securityContext") or {}
        uid = own.get("runAsUser", pod.get("runAsUser"))
        gid = own.get("runAsGroup", pod.get("runAsGroup"))
        return uid, gid, pod.get("fsGroup")

    def ready_port(self) -> int | None:
        probe = (self.container.get("readinessProbe") or {}).get("tcpSocket")
        if not probe:
            return None
        port = probe["port"]
        if isinstance(port, str):  # a named port
            for p in self.container.get("ports") or []:
                if p.get("name") == port:
                    return int(p["containerPort"])
            raise HostError(f"pod {self.name}: readinessProbe names port {port!r}, not declared")
        return int(port)


class Job:
    """Everything an engine derives from the objects: pods, keys, files, variables."""

    def __init__(self, engine: str, name: str, namespace: str):
        self.engine = engine
        self.name = name
        self.namespace = namespace
        self.workers: list[Pod] = []
        self.launcher: Pod | None = None
        self.key_type = ("ecdsa", "521")
        self.key_dir = "/root/.ssh"
        self.key_modes = {"id_rsa": 0o600, "id_rsa.pub": 0o600, "authorized_keys": 0o600}
        self.ssh_config: str | None = None
        self.launcher_files: dict[str, str] = {}  # container path -> content
        self.all_files: dict[str, str] = {}
        # The launcher's ConfigMap directory (mpijob): launcher_files under it live there, and
        # discover_hosts.sh beside them.
        self.config_dir: str | None = None
        self.launcher_as_worker = False
        self.new_worker: Callable[[int], Pod] | None = None  # a worker added mid-job (mpijob)
        self.slots = 1  # processes per worker


def plugin_args(plugins: dict, name: str) -> dict[str, str]:
    """A Volcano plugin's ["--key=value", ...] as a mapping; anything else is refused."""
    found = {}
    for arg in plugins.get(name) or []:
        if not isinstance(arg, str) or not arg.startswith("--") or "=" not in arg:
            raise HostError(f"the {name} plugin's argument {arg!r} is not --key=value")
        key, value = arg[2:].split("=", 1)
        found[key] = value
    return found


def _one(objects: list[dict], kind: str) -> dict:
    found = [o for o in objects if o.get("kind") == kind]
    if len(found) != 1:
        raise HostError(f"the overlay has {len(found)} objects of kind {kind}, not 1")
    return found[0]


def take_volumes(pod: Pod) -> None:
    """The pod's volumes as Docker can give them (an emptyDir at /dev/shm: --shm-size; a
    PersistentVolumeClaim: the shared directory), read once; anything else is refused."""
    volumes = {v["name"]: v for v in pod.spec.get("volumes") or []}
    for mount in pod.container.get("volumeMounts") or []:
        vol = volumes.get(mount["name"])
        if vol is None:
            raise HostError(f"pod {pod.name}: volumeMount {mount['name']!r} names no volume")
        if "emptyDir" in vol and mount["mountPath"] == "/dev/shm":
            size = str(vol["emptyDir"].get("sizeLimit", "1Gi"))
            m = SIZE.fullmatch(size)
            if not m:
                raise HostError(f"pod {pod.name}: /dev/shm sizeLimit {size!r} is not simulated")
            pod.shm = m.group(1) + {"Ki": "k", "Mi": "m", "Gi": "g", None: "b"}[m.group(2)]
        elif "persistentVolumeClaim" in vol:
            pod.claims.append((mount["mountPath"], bool(mount.get("readOnly"))))
        else:
            raise HostError(
                f"pod {pod.name}: volume {mount['name']!r} of this kind is not simulated"
            )


def plan(engine: str, objects: list[dict], workers: int) -> Job:
    """The engine's view of the objects (with `workers` worker replicas)."""
    if engine == "mpijob":
        mj = _one(objects, "MPIJob")
        spec = mj["spec"]
        job = Job(engine, mj["metadata"]["name"], mj["metadata"].get("namespace", "default"))
        slots = int(spec.get("slotsPerWorker", 1))
        job.key_dir = spec.get("sshAuthMountPath", "/root/.ssh")
        mode = 0o600 if job.key_dir == "/root/.ssh" else 0o644
        job.key_modes = {k: mode for k in job.key_modes}
        replicas = spec["mpiReplicaSpecs"]
        job.config_dir = "/etc/mpi"
        job.launcher_as_worker = bool(spec.get("runLauncherAsWorker"))
        worker_spec = replicas["Worker"]["template"]["spec"]

        def new_worker(i: int) -> Pod:
            pod = Pod(f"{job.name}-worker-{i}", job.name, job.namespace, copy.deepcopy(worker_spec))
            pod.env["K_MPI_JOB_ROLE"] = "worker"
            return pod

        job.new_worker = new_worker
        job.workers = [new_worker(i) for i in range(workers)]
        job.launcher = Pod(
            f"{job.name}-launcher",
            job.name,
            job.namespace,
            replicas["Launcher"]["template"]["spec"],
        )
        job.slots = slots
        job.launcher_files["/etc/mpi/hostfile"] = mpijob_hostfile(job)
        job.launcher.env.update(
            {
                "K_MPI_JOB_ROLE": "launcher",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
                "OMPI_MCA_orte_set_default_slots": str(slots),
                "NVIDIA_VISIBLE_DEVICES": "",
                "NVIDIA_DRIVER_CAPABILITIES": "",
            }
        )
    elif engine == "trainer":
        tj = _one(objects, "TrainJob")
        runtime = _one(objects, "ClusterTrainingRuntime")
        job = Job(engine, tj["metadata"]["name"], tj["metadata"].get("namespace", "default"))
        mpi = runtime["spec"]["mlPolicy"]["mpi"]
        trainer = tj["spec"].get("trainer") or {}
        slots = int(trainer.get("numProcPerNode", mpi.get("numProcPerNode", 1)))
        job.key_dir = mpi.get("sshAuthMountPath", "/root/.ssh")
        job.key_modes = {"id_rsa": 0o640, "id_rsa.pub": 0o644, "authorized_keys": 0o644}
        jobs = {r["name"]: r for r in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
        node_spec = jobs["node"]["template"]["spec"]["template"]["spec"]
        launcher_spec = jobs["launcher"]["template"]["spec"]["template"]["spec"]
        job.workers = [
            Pod(f"{job.name}-node-0-{i}", job.name, job.namespace, node_spec)
            for i in range(workers)
        ]
        job.launcher = Pod(f"{job.name}-launcher-0-0", job.name, job.namespace, launcher_spec)
        # The TrainJob's trainer goes into the launcher's container named "node".
        for field in ("command", "args", "image"):
            if field in trainer:
                job.launcher.container[field] = trainer[field]
        job.launcher.env.update({e["name"]: e.get("value", "") for e in trainer.get("env") or []})
        hostfile = "".join(f"{p.aliases[0]} slots={slots}\n" for p in job.workers)
        job.launcher_files["/etc/mpi/hostfile"] = hostfile
        job.launcher.env.update(
            {
                "OMPI_MCA_orte_default_hostfile": "/etc/mpi/hostfile",
                "OMPI_MCA_orte_keep_fqdn_hostnames": "true",
                "OMPI_MCA_orte_set_default_slots": str(slots),
                "OMPI_MCA_plm_rsh_args": "-o ConnectionAttempts=10",
            }
        )
    elif engine == "volcano":
        vj = _one(objects, "Job")
        spec = vj["spec"]
        job = Job(engine, vj["metadata"]["name"], vj["metadata"].get("namespace", "default"))
        plugins = spec.get("plugins") or {}
        mpi_args = plugin_args(plugins, "mpi")
        master, worker = mpi_args.get("master", "master"), mpi_args.get("worker", "worker")
        port = mpi_args.get("port", "22")
        if not port.isdigit():
            raise HostError(f"the mpi plugin's --port={port!r} is no port number")
        job.key_type = ("rsa", "2048")
        ssh_args = plugin_args(plugins, "ssh")
        job.key_dir = ssh_args.get("ssh-key-file-path", "/root/.ssh")
        mode = 0o600 if job.key_dir == "/root/.ssh" else 0o644
        job.key_modes = {k: mode for k in job.key_modes} | {"config": mode}
        tasks = {t["name"]: t for t in spec["tasks"]}
        if master not in tasks or worker not in tasks:
            raise HostError(f"the mpi plugin names tasks {master!r} and {worker!r}: not both there")
        job.workers = [
            Pod(
                f"{job.name}-{worker}-{i}",
                job.name,
                job.namespace,
                tasks[worker]["template"]["spec"],
            )
            for i in range(workers)
        ]
        job.launcher = Pod(
            f"{job.name}-{master}-0", job.name, job.namespace, tasks[master]["template"]["spec"]
        )
        pods = {worker: job.workers, master: [job.launcher]}
        env = {}
        for task, members in pods.items():
            hosts = [p.aliases[0] for p in members]
            job.all_files[f"/etc/volcano/{task}.host"] = "\n".join(hosts)
            key = task.upper().replace("-", "_")
            env[f"VC_{key}_HOSTS"] = ",".join(hosts)
            env[f"VC_{key}_NUM"] = str(len(hosts))
        for p in [*job.workers, job.launcher]:
            p.env.update(env)
        job.launcher.env["MPI_HOST"] = ",".join(p.aliases[0] for p in job.workers)
        job.ssh_config = "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\n" + "".join(
            f"Host {p.name}\n  HostName {p.aliases[0]}\n  Port {port}\n"
            for p in [*job.workers, job.launcher]
        )
    else:
        raise HostError(f"engine {engine!r}: use one of {', '.join(ENGINES)}")
    for pod in [*job.workers, job.launcher]:
        check_pod(pod)
    return job


def check_pod(pod: Pod) -> None:
    """The pod's volumes taken; what cannot be simulated refused."""
    take_volumes(pod)
    caps = ((pod.container.get("securityContext") or {}).get("capabilities") or {}).get("add")
    extra = sorted(set(caps or []) - ALLOWED_CAPS)
    if extra:
        raise HostError(f"pod {pod.name} adds capabilities {', '.join(extra)}: not simulated")
    limits = (pod.container.get("resources") or {}).get("limits") or {}
    devices = [k for k in limits if "/" in k]
    if devices:
        raise HostError(f"pod {pod.name} asks for {', '.join(devices)}: not simulated here")


def mpijob_hostfile(job: Job) -> str:
    """The MPI Operator's /etc/mpi/hostfile: every worker replica, with slotsPerWorker."""
    return "".join(f"{p.aliases[1]} slots={job.slots}\n" for p in job.workers)


def discover_hosts_script(job: Job, running: list[Pod]) -> str:
    """The MPI Operator's discover_hosts.sh for these Running workers."""
    names = sorted(p.name for p in running)
    if job.launcher_as_worker:
        names.insert(0, job.launcher.name)
    return "#!/bin/sh\n" + "".join(f"echo {n}.{job.name}.{job.namespace}.svc\n" for n in names)


def docker_args(pod: Pod) -> tuple[list[str], list[str]]:
    """(--entrypoint options, image arguments) with Kubernetes' semantics: `command` replaces the
    image's ENTRYPOINT, `args` its CMD; $(VAR) references expanded from the container's env."""
    command = [expand(c, pod.env) for c in pod.container.get("command") or []]
    args = [expand(a, pod.env) for a in pod.container.get("args") or []]
    if command:
        return ["--entrypoint", command[0]], [*command[1:], *args]
    return [], args


# --- running it ------------------------------------------------------------------------------


class Sim:
    def __init__(self, job: Job, image: str, docker: Docker, work: Path, label: str | None = None):
        self.job = job
        self.image = image
        self.docker = docker
        self.work = work
        self.tag = f"k8s-sim-{uuid.uuid4().hex[:8]}"
        self.label = label or self.tag  # every container and the network carry k8s-sim=<label>
        self.network = self.tag
        self.containers: list[str] = []
        self.launcher_lines: list[str] = []
        self.config: Path | None = None  # the launcher's ConfigMap directory, where there is one
        self.follower: subprocess.Popen | None = None

    def d(self, *args: str, timeout: float = 120, check: bool = True) -> str:
        try:
            return self.docker(*args, timeout=timeout, check=check).stdout
        except HostError as exc:
            if exc.code == TIMED_OUT and not check:
                return ""
            raise

    def make_files(self) -> None:
        """The Secret (one key pair; in each pod a world-writable directory of the engine's
        files, root-owned with the pod's fsGroup as their group, mounted read-only), the
        launcher's and every pod's files, the shared claim."""
        keys = self.work / "keys"
        keys.mkdir()
        kind, bits = self.job.key_type
        keygen = ["ssh-keygen", "-q", "-t", kind, "-b", bits, "-m", "PEM", "-N", "", "-C", ""]
        subprocess.run([*keygen, "-f", str(keys / "id_rsa")], check=True, timeout=60)
        shutil.copy(keys / "id_rsa.pub", keys / "authorized_keys")
        if self.job.ssh_config is not None:
            (keys / "config").write_text(self.job.ssh_config)
        claim = self.work / "claim"
        claim.mkdir()
        os.chmod(claim, 0o777)  # fsGroup's group-writable volume, for root and uid 1000 alike
        config = self.job.config_dir
        if config is not None:  # the ConfigMap volume: one directory, files replaced in it
            self.config = self.work / "configmap"
            self.config.mkdir()
            self.job.launcher.mounts.append((self.config, config, True))
        for n, (path, text) in enumerate({**self.job.launcher_files, **self.job.all_files}.items()):
            if os.path.dirname(path) == config:
                self.write_config(os.path.basename(path), text, 0o444)
                continue
            host = self.work / f"file-{n}"
            host.write_text(text)
            os.chmod(host, 0o444)
            pods = [self.job.launcher] if path in self.job.launcher_files else self.all_pods()
            for p in pods:
                p.mounts.append((host, path, True))
        for p in self.all_pods():
            self.pod_files(p)

    def pod_files(self, p: Pod) -> None:
        """The pod's own copy of the Secret, and the shared claim where it mounts one."""
        secret = Path(tempfile.mkdtemp(prefix="secret-", dir=self.work))
        fs_group = p.security()[2]
        for name, mode in self.job.key_modes.items():
            shutil.copy(self.work / "keys" / name, secret / name)
            os.chown(secret / name, 0, fs_group if fs_group is not None else 0)
            os.chmod(secret / name, mode)
        os.chmod(secret, 0o1777)
        p.mounts.append((secret, self.job.key_dir, True))
        p.mounts += [(self.work / "claim", path, ro) for path, ro in p.claims]

    def write_config(self, name: str, text: str, mode: int) -> None:
        """One file of the ConfigMap directory, replaced at once (the kubelet swaps a symlink):
        a reader sees the old file or the new one, never half of it."""
        tmp = self.config / f".{name}.new"
        tmp.write_text(text)
        os.chmod(tmp, mode)
        os.replace(tmp, self.config / name)

    def sync_configmap(self, delay: float, stop: threading.Event) -> None:
        """discover_hosts.sh follows the Running workers, `delay` seconds behind them."""
        shown: list[str] | None = None
        pending: tuple[float, list[str]] | None = None
        while not stop.is_set():
            running = [p for p, name in self.worker_containers() if self.running(name)]
            now = [p.name for p in running]
            if now != (pending[1] if pending else shown):
                pending = (time.monotonic() + delay, now)
            if pending and time.monotonic() >= pending[0]:
                names = set(pending[1])
                pods = [p for p in self.job.workers if p.name in names]
                try:
                    self.write_config(
                        "discover_hosts.sh", discover_hosts_script(self.job, pods), 0o555
                    )
                except OSError as exc:  # the run is ending and its directory going
                    say(f"discover_hosts.sh not rewritten: {exc}")
                    return
                shown, pending = pending[1], None
                say(f"discover_hosts.sh lists {', '.join(sorted(names)) or 'no worker'}")
            stop.wait(0.5)

    def worker_containers(self) -> list[tuple[Pod, str]]:
        return [(p, self.container(p)) for p in self.job.workers]

    def container(self, pod: Pod) -> str:
        return f"{self.tag}-{pod.name}"

    def add_worker(self) -> str:
        """Worker.replicas + 1: the operator creates the next pod now, Ready or not, and
        rebuilds the hostfile from the replicas."""
        pod = self.job.new_worker(len(self.job.workers))
        check_pod(pod)
        self.pod_files(pod)
        self.job.workers.append(pod)
        self.write_config("hostfile", mpijob_hostfile(self.job), 0o444)
        name = self.start(pod)
        say(f"added worker {pod.name}")
        return name

    def all_pods(self) -> list[Pod]:
        return [*self.job.workers, self.job.launcher]

    def start(self, pod: Pod) -> str:
        name = self.container(pod)
        uid, gid, fs_group = pod.security()
        opts = ["run", "-d", "--name", name, "--hostname", pod.name, "--network", self.network]
        opts += ["--label", f"k8s-sim={self.label}", "--shm-size", pod.shm]
        for alias in pod.aliases:
            opts += ["--network-alias", alias]
        if uid is not None:
            opts += ["--user", f"{uid}:{gid if gid is not None else uid}"]
        if fs_group is not None:
            opts += ["--group-add", str(fs_group)]
        if pod.spec.get("shareProcessNamespace"):
            opts.append("--init")  # a PID 1 that reaps and passes signals on, as pause does
        caps = ((pod.container.get("securityContext") or {}).get("capabilities") or {}).get("add")
        for cap in sorted(set(caps or []) & ALLOWED_CAPS):
            opts += ["--cap-add", cap]
        for key, value in pod.env.items():
            opts += ["-e", f"{key}={value}"]
        for host, path, ro in pod.mounts:
            opts += ["-v", f"{host}:{path}{':ro' if ro else ''}"]
        entry, args = docker_args(pod)
        self.containers.append(name)  # recorded first: removed even if it never starts
        self.d(*opts, *entry, self.image, *args)
        return name

    def running(self, name: str) -> bool:
        return self.d("inspect", "-f", "{{.State.Running}}", name, check=False).strip() == "true"

    def wait_ready(self, pod: Pod, name: str, deadline: float) -> None:
        """The readinessProbe: a TCP connection to its port, from inside the pod."""
        port = pod.ready_port()
        if port is None:
            return  # no probe: Ready once started
        probe = f"exec 3<>/dev/tcp/127.0.0.1/{port}"
        while time.monotonic() < deadline:
            if not self.running(name):
                logs = self.d("logs", "--tail", "20", name, check=False)
                raise HostError(f"worker {pod.name} exited before it was Ready: {logs.strip()}")
            probe_run = ["exec", name, "bash", "-c", probe]
            try:
                done = self.docker(*probe_run, check=False, timeout=10)
            except HostError as exc:
                if exc.code != TIMED_OUT:
                    raise
                continue
            if done.returncode == 0:
                return
            time.sleep(0.5)
        raise HostError(f"worker {pod.name} was not Ready (port {port}) in time")

    def follow(self, name: str) -> threading.Thread:
        def pump() -> None:
            proc = self.follower = self.docker.follow(name)
            for line in proc.stdout:
                self.launcher_lines.append(line)
                print(f"[launcher] {line}", end="", flush=True)
            proc.wait()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        return t

    def cleanup(self) -> None:
        if self.follower is not None and self.follower.poll() is None:
            self.follower.kill()
        for name in reversed(self.containers):
            self.d("rm", "-f", name, check=False, timeout=60)
        self.d("network", "rm", self.network, check=False, timeout=60)


@dataclass
class Scenario:
    """What happens to the job while it runs: triggered by the launcher's output."""

    kill_worker: int | None = None
    kill_when: re.Pattern = FIRST_STEP
    add_workers: int = 0
    add_when: re.Pattern = FIRST_STEP
    configmap_delay: float = 5.0


def run(
    job: Job,
    image: str,
    docker: Docker,
    timeout: float,
    scenario: Scenario,
    label: str | None = None,
) -> dict:
    start = time.monotonic()
    deadline = start + timeout
    result: dict = {"engine": job.engine, "job": job.name, "workers": [p.name for p in job.workers]}
    stop_sync = threading.Event()
    syncer: threading.Thread | None = None
    with tempfile.TemporaryDirectory(prefix="k8s-sim-") as tmp:
        sim = Sim(job, image, docker, Path(tmp), label)
        try:
            sim.make_files()
            sim.d("network", "create", "--label", f"k8s-sim={sim.label}", sim.network)
            names = [sim.start(p) for p in job.workers]
            for pod, name in zip(job.workers, names, strict=True):
                sim.wait_ready(pod, name, deadline)
            say(f"{len(names)} worker(s) Ready in {time.monotonic() - start:.1f} s; the launcher")
            if sim.config is not None:
                sim.write_config(
                    "discover_hosts.sh", discover_hosts_script(job, job.workers), 0o555
                )
                syncer = threading.Thread(
                    target=sim.sync_configmap,
                    args=(scenario.configmap_delay, stop_sync),
                    daemon=True,
                )
                syncer.start()
            launcher = sim.start(job.launcher)
            pump = sim.follow(launcher)
            killed_at = None
            added = scenario.add_workers == 0
            seen = 0  # launcher lines read by the triggers
            text = ""
            while sim.running(launcher):
                if time.monotonic() > deadline:
                    say(f"the job ran past --timeout {timeout:.0f} s")
                    result["exit_code"] = 124
                    return result
                lines = sim.launcher_lines[seen:]
                seen += len(lines)
                text = (text + "".join(lines))[-100_000:]
                m = None if added else scenario.add_when.search(text)
                if m:
                    names += [sim.add_worker() for _ in range(scenario.add_workers)]
                    added, text = True, text[m.end() :]  # later triggers: what follows
                if (
                    added
                    and scenario.kill_worker is not None
                    and killed_at is None
                    and scenario.kill_when.search(text)
                ):
                    sim.d("kill", names[scenario.kill_worker])
                    killed_at = time.monotonic()
                    say(f"killed worker {job.workers[scenario.kill_worker].name}")
                time.sleep(0.2)
            code = int(sim.d("inspect", "-f", "{{.State.ExitCode}}", launcher).strip())
            pump.join(10)
            result["exit_code"] = code
            if scenario.add_workers and not added:
                raise HostError("the launcher ended before --add-when matched: nothing added")
            if scenario.kill_worker is not None:
                if killed_at is None:
                    raise HostError("the launcher ended before --kill-when matched: nothing killed")
                result["seconds_after_kill"] = round(time.monotonic() - killed_at, 1)
            # The engine's clean-up: workers still running are deleted now the launcher ended.
            result["workers_running_at_end"] = [
                p.name for p, n in zip(job.workers, names, strict=True) if sim.running(n)
            ]
            return result
        finally:
            stop_sync.set()
            if syncer is not None:
                syncer.join(10)
            result["workers"] = [p.name for p in job.workers]
            out = "".join(sim.launcher_lines)
            result["launcher_output"] = out
            # Where the ranks ran: a job that silently collapsed onto one node shows here.
            ranks = {int(r): (int(n), h) for r, n, h in RANK_LINE.findall(out)}
            result["world_sizes"] = sorted({n for n, _ in ranks.values()})
            result["rank_hosts"] = {str(r): h for r, (_, h) in sorted(ranks.items())}
            result["seconds"] = round(time.monotonic() - start, 1)
            sim.cleanup()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--engine", required=True, choices=ENGINES)
    p.add_argument("--overlay", type=Path, default=None, help="default: overlays/<engine>-cpu")
    p.add_argument("--workers", type=int, default=2, help=f"worker replicas, 1 to {MAX_WORKERS}")
    p.add_argument("--image", default=os.environ.get("BYOC_IMAGE", "pytorch-horovod:cpu"))
    p.add_argument(
        "--extra-arg",
        action="append",
        default=[],
        help="appended to the launcher's args (e.g. the example's --fail-on-rank=1)",
    )
    p.add_argument("--kill-worker", type=int, default=None, help="kill worker I mid-job")
    p.add_argument(
        "--kill-when",
        default=None,
        help="kill it once the launcher's output (after any --add-workers) matches this "
        "regular expression (default: a rank's first step)",
    )
    p.add_argument("--add-workers", type=int, default=0, help="mpijob: Worker.replicas + N mid-job")
    p.add_argument("--add-when", default=None, help="add them once the output matches this")
    p.add_argument(
        "--configmap-delay",
        type=float,
        default=5.0,
        help="mpijob: seconds from a worker's start or death to discover_hosts.sh showing it",
    )
    p.add_argument("--timeout", type=float, default=600.0, help="seconds for the whole job")
    p.add_argument("--json", type=Path, default=None, help="write the result here too")
    p.add_argument(
        "--label", default=None, help="k8s-sim=LABEL on everything it makes (default: its own)"
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    if not 1 <= args.workers <= MAX_WORKERS:
        p.error(f"--workers must be 1 to {MAX_WORKERS}")
    if not 0 <= args.add_workers <= MAX_WORKERS - args.workers:
        p.error(f"--add-workers: 0 to {MAX_WORKERS - args.workers} (at most {MAX_WORKERS} in all)")
    if args.add_workers and args.engine != "mpijob":
        # Trainer v2 makes numNodes immutable; a Volcano Job's replicas can change, but the
        # hosts files and variables of the pods already running do not (docs/elastic.md).
        p.error("--add-workers: only the mpijob engine adds workers to a running job")
    if args.kill_when is not None and args.kill_worker is None:
        p.error("--kill-when needs --kill-worker")
    if args.add_when is not None and not args.add_workers:
        p.error("--add-when needs --add-workers")
    if args.add_workers and args.kill_worker is not None and args.kill_when is None:
        # After an add, a rank's first step is long past: say what to wait for.
        p.error("--kill-worker with --add-workers needs --kill-when (e.g. the larger world)")
    everyone = args.workers + args.add_workers
    if args.kill_worker is not None and not 0 <= args.kill_worker < everyone:
        p.error(f"--kill-worker must name a worker, 0 to {everyone - 1}")
    if not 0 <= args.configmap_delay <= 300:
        p.error("--configmap-delay must be 0 to 300 seconds")
    scenario = Scenario(
        kill_worker=args.kill_worker,
        add_workers=args.add_workers,
        configmap_delay=args.configmap_delay,
    )
    for option in ("kill_when", "add_when"):
        text = getattr(args, option)
        if text is None:
            continue
        try:
            setattr(scenario, option, re.compile(text))
        except re.error as exc:
            p.error(f"--{option.replace('_', '-')} {text!r}: not a regular expression: {exc}")
    if args.label is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}", args.label):
        p.error("--label: letters, digits, '_', '.' and '-', at most 63")
    if not 10 <= args.timeout <= 7200:
        p.error("--timeout must be 10 to 7200 seconds")
    if not IMAGE_REF.fullmatch(args.image):
        p.error(f"--image {args.image!r} is not an image reference")
    if os.geteuid() != 0:
        # The Secret's files are root-owned with the pods' fsGroup, as the engines mount them.
        p.error("run it as root: it lays out the engines' Secret files root-owned")
    overlay = args.overlay or DEFAULT_OVERLAY[args.engine]
    try:
        docker = Docker()
        if not (overlay / "kustomization.yaml").is_file():
            raise HostError(f"--overlay {overlay}: no kustomization.yaml there")
        try:
            objects = k8s_validate.render(overlay)
        except (k8s_validate.RenderError, OSError, yaml.YAMLError) as exc:
            raise HostError(f"{overlay} does not render: {exc}") from None
        errors = k8s_validate.validate_objects(objects)
        if errors:
            raise HostError(f"{overlay} does not validate: " + "; ".join(errors[:5]))
        job = plan(args.engine, objects, args.workers)
        if args.extra_arg:
            job.launcher.container["args"] = [
                *job.launcher.container.get("args", []),
                *args.extra_arg,
            ]
        say(f"{args.engine}: job {job.name}, {args.workers} worker(s), image {args.image}")
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # finally: blocks still clean up
        result = run(job, args.image, docker, args.timeout, scenario, args.label)
    except HostError as exc:
        say(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        say("interrupted; cleaned up")
        return 130
    summary = {k: v for k, v in result.items() if k != "launcher_output"}
    say(json.dumps(summary))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return int(result["exit_code"])


if __name__ == "__main__":
    sys.exit(main())
