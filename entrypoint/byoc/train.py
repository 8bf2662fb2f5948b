"""`train`: run a SageMaker training job with Horovod across the job's hosts.

read the contract (config) -> stage the code (code) -> plan the launch (plan) ->
single host: run it | leader: SSH to the workers, horovodrun | worker: serve SSH until the
leader's job is over -> report the result (report). One exit point: main().
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path

from byoc import code, config, coordinator, environment, plan, procs, report, ssh
from byoc import constants as C


class JobError(Exception):
    """A failure with a message a person can act on, and the exit code to leave with."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


class Terminated(Exception):
    pass


def _seconds(env: dict[str, str], name: str, default: float) -> float:
    try:
        return float(env.get(name, default))
    except ValueError:
        raise JobError(f"{name} must be a number of seconds, got {env.get(name)!r}", 2) from None


def _on_sigterm(signum, frame):
    raise Terminated()


def check_shm(path: str = "/dev/shm") -> None:
    try:
        st = os.statvfs(path)
    except OSError:
        return
    size = st.f_blocks * st.f_frsize
    if size < C.SHM_MIN_BYTES:
        print(
            f"byoc: WARNING: {path} is {size // (1 << 20)} MB; NCCL and DataLoader workers need "
            "more (hangs or 'Bus error'). Run with --shm-size=1g or more (docker run, compose "
            "shm_size); where it cannot be changed, set NCCL_SHM_DISABLE=1 and use fewer "
            "DataLoader workers.",
            file=sys.stderr,
            flush=True,
        )


def failure_message(watcher: report.OutputWatcher, exit_code: int, cfg, slots: int) -> str:
    failure = watcher.first_failure
    if failure:
        host = plan.rank_host(failure.rank, cfg, slots)
        head = f"rank {failure.rank} on {host} raised {failure.exception}"
        return "\n".join(
            [f"Training failed: {head} ({report.describe_exit(exit_code)})", "", *failure.traceback]
        )
    tail = "\n".join(list(watcher.tail)[-15:])
    return f"Training failed with {report.describe_exit(exit_code)}. Last output:\n{tail}"


def prepare(cfg: config.JobConfig, env: dict[str, str]):
    """Code, arguments and environment of the user's program on this host."""
    hps = cfg.hyperparameters
    code_dir = cfg.path(C.CODE_DIR)
    try:
        code.stage(code.submit_directory(hps, env), code_dir)
        code.install_requirements(code_dir)
        program = code.resolve(code.program_name(hps, env), code_dir)
    except code.CodeError as exc:
        raise JobError(f"User code: {exc}", 2) from exc
    user_args = environment.to_cmd_args(environment.user_hyperparameters(hps))
    num_gpus = plan.count_gpus()
    sm = environment.sm_variables(
        cfg,
        entry_point=program.entry_point,
        module_dir=str(program.code_dir),
        num_gpus=num_gpus,
        num_cpus=os.cpu_count() or 1,
        user_args=user_args,
    )
    run_env = environment.merged_environment(env, sm)
    command = [*program.command, *user_args]
    if len(cfg.hosts) > 1:
        command = [sys.executable, "-m", "byoc.rank", *command]
    for d in (C.MODEL_DIR, C.OUTPUT_DATA_DIR, C.CHECKPOINT_DIR):
        cfg.path(d).mkdir(parents=True, exist_ok=True)
    return program, command, run_env, num_gpus


def setup_ssh(
    cfg: config.JobConfig, env: dict[str, str], public_key: str, port: int
) -> subprocess.Popen:
    dns_timeout = _seconds(env, C.DNS_TIMEOUT_ENV, C.DEFAULT_DNS_TIMEOUT)
    try:
        addresses = [ssh.resolve(h, dns_timeout) for h in cfg.hosts]
        ssh.authorize(public_key, [*addresses, "127.0.0.1"])
        ssh.write_client_config(port)
        config_file = ssh.write_sshd_config(port, ssh.generate_host_keys())
        return ssh.start_sshd(config_file)
    except ssh.SSHError as exc:
        raise JobError(f"SSH setup: {exc}") from exc


def run_leader(cfg, env, run_env, command, cwd, slots, watcher) -> int:
    port = int(env.get(C.SSH_PORT_ENV, C.DEFAULT_SSH_PORT))
    given = ssh.given_private_key(env)
    public_key = ssh.install_private_key(given) if given else ssh.generate_job_key()
    state = coordinator.JobState(None if given else public_key)
    server = coordinator.serve(state, int(env.get(C.COORD_PORT_ENV, C.DEFAULT_COORD_PORT)))
    workers = cfg.hosts[1:]
    exit_code = 1
    try:
        setup_ssh(cfg, env, public_key, port)
        timeout = _seconds(env, C.PEER_TIMEOUT_ENV, C.DEFAULT_PEER_TIMEOUT)
        deadline = time.monotonic() + timeout
        for host in workers:
            try:
                took = ssh.wait_for_login(host, max(1.0, deadline - time.monotonic()))
            except ssh.SSHError as exc:
                raise JobError(f"{exc} (set {C.PEER_TIMEOUT_ENV} to wait longer)") from exc
            print(f"byoc: {host} accepts SSH ({took:.1f} s)", flush=True)
        state.set("running")
        print(f"byoc: launching {plan.describe(command)}", flush=True)
        exit_code = procs.run_watched(command, run_env, cwd, watcher)
        return exit_code
    finally:
        state.set("done", exit_code)
        # Leave as soon as every worker knows the result (bounded: a dead worker cannot hold us).
        late = state.wait_seen(workers, timeout=15)
        if late:
            print(f"byoc: workers that did not collect the result: {sorted(late)}", flush=True)
        server.shutdown()


def run_worker(cfg, env) -> int:
    port = int(env.get(C.SSH_PORT_ENV, C.DEFAULT_SSH_PORT))
    coord_port = int(env.get(C.COORD_PORT_ENV, C.DEFAULT_COORD_PORT))
    leader = cfg.leader
    appear = _seconds(env, C.LEADER_TIMEOUT_ENV, C.DEFAULT_LEADER_TIMEOUT)
    lost_after = _seconds(env, C.LEADER_LOST_ENV, C.DEFAULT_LEADER_LOST)
    given = ssh.given_private_key(env)
    try:
        if given:
            public_key = ssh.install_private_key(given)
        else:
            public_key = coordinator.wait_for_leader(leader, coord_port, "/pubkey", appear).decode()
    except TimeoutError as exc:
        raise JobError(f"Worker {cfg.current_host}: {exc}") from exc
    sshd = setup_ssh(cfg, env, public_key, port)
    print(f"byoc: {cfg.current_host} serving SSH on port {port}; waiting for {leader}", flush=True)
    last_ok = time.monotonic()
    while True:
        try:
            status = coordinator.fetch_status(leader, coord_port, cfg.current_host)
            last_ok = time.monotonic()
        except (OSError, ValueError) as exc:
            if time.monotonic() - last_ok > lost_after:
                raise JobError(
                    f"Worker {cfg.current_host}: leader {leader} unreachable for "
                    f"{lost_after:.0f} s ({exc}); the job cannot finish",
                    1,
                ) from exc
            status = None
        if status and status["state"] == "done":
            code_ = int(status["exit_code"] if status["exit_code"] is not None else 1)
            if code_ != 0:
                raise JobError(
                    f"The job failed on the leader {leader} ({report.describe_exit(code_)}); "
                    f"its failure file names the cause",
                    code_,
                )
            return 0
        if sshd.poll() is not None:
            raise JobError(f"Worker {cfg.current_host}: sshd exited ({sshd.returncode})")
        time.sleep(0.25)


def run_job(root: Path | None) -> tuple[int, str | None, Path]:
    """The job's exit code, failure message (None on success) and the /opt/ml root."""
    env = dict(os.environ)
    root = config.ml_root(env) if root is None else root
    cfg = None
    slots = 1
    watcher = report.OutputWatcher()
    try:
        cfg = config.load(root)
        check_shm()
        program, command, run_env, num_gpus = prepare(cfg, env)
        the_plan = plan.make_plan(cfg, command, num_gpus=num_gpus, env=env)
        slots = the_plan.slots
        print(
            f"byoc: {the_plan.role} {cfg.current_host} of {cfg.hosts}; {slots} process(es) per "
            f"host, world size {the_plan.world_size}; program {program.entry_point}",
            flush=True,
        )
        if the_plan.role == "worker":
            code_ = run_worker(cfg, env)
        elif the_plan.role == "leader":
            code_ = run_leader(
                cfg, env, run_env, the_plan.command, program.code_dir, slots, watcher
            )
        else:
            code_ = procs.run_watched(the_plan.command, run_env, program.code_dir, watcher)
        if code_ != 0:
            return code_, failure_message(watcher, code_, cfg, slots), root
        return 0, None, root
    except config.ConfigError as exc:
        return 2, f"Invalid job configuration: {exc}", root
    except JobError as exc:
        return exc.exit_code, str(exc), root
    except Terminated:
        grace = _seconds(env, C.TERM_GRACE_ENV, C.DEFAULT_TERM_GRACE)
        procs.terminate_all(grace)
        where = f" Checkpoints: {root / C.CHECKPOINT_DIR}." if cfg else ""
        return (
            143,
            f"Stopped by SIGTERM (docker stop, spot interruption or StopTrainingJob).{where}",
            root,
        )
    except Exception:  # noqa: BLE001 - our own crash is reported as such, with its traceback
        return 1, "Framework Error: byoc train crashed:\n" + traceback.format_exc(), root


def main(root: Path | None = None) -> int:
    signal.signal(signal.SIGTERM, _on_sigterm)
    exit_code, failure, root = run_job(root)
    if failure is None:
        report.write_success(root)
        print("byoc: training succeeded", flush=True)
    else:
        report.write_failure(root, failure)
        print(f"byoc: {failure}", file=sys.stderr, flush=True)
    return exit_code


if __name__ == "__main__":
    sys.exit(main())
