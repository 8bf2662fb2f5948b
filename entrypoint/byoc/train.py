"""`train`: run a SageMaker training job across the job's hosts.

settings -> the contract (config) -> the launcher (plan.choose_launcher) -> the code (code) ->
the plan -> the launcher runs it (byoc.launch.horovod | torchrun | the bare program) -> the result
(report). One exit point: main().
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from pathlib import Path

from byoc import code, config, doctor, environment, netif, plan, procs, report, settings, warmpool
from byoc import constants as C
from byoc.errors import JobError, Terminated
from byoc.launch import Job, Shutdown, failure_message, run_local
from byoc.launch import horovod as horovod_launcher
from byoc.launch import outsider as outsider_launcher
from byoc.launch import torchrun as torchrun_launcher

SHUTDOWN = Shutdown()


def prepare(
    cfg: config.JobConfig, env: dict[str, str], launcher: str, the_settings: settings.Settings
) -> tuple[code.Program, list[str], dict[str, str], int]:
    """Code, arguments and environment of the user's program on this host."""
    hps = cfg.hyperparameters
    code_dir = cfg.path(C.CODE_DIR)
    cache = warmpool.prepare(the_settings.warm_pool_cache)
    if cache.note:
        print(f"byoc: {cache.note}", flush=True)
    try:
        code.stage(code.submit_directory(hps, env), code_dir)
        code.install_requirements(code_dir, cache.pip)
        program = code.resolve(
            code.program_name(hps, env), code_dir, plan.default_program(launcher)
        )
    except code.CodeError as exc:
        raise JobError(f"User code: {exc}", 2) from exc
    user_args = environment.to_cmd_args(environment.user_hyperparameters(hps))
    num_gpus = plan.count_gpus()
    sm = environment.sm_variables(
        cfg,
        entry_point=program.entry_point,
        # As the toolkit: the submitted directory as given (an s3:// URI, say), else code/.
        module_dir=code.submit_directory(hps, env) or str(code_dir),
        num_gpus=num_gpus,
        num_cpus=os.cpu_count() or 1,
        user_args=user_args,
    )
    for d in (C.MODEL_DIR, C.OUTPUT_DATA_DIR, C.CHECKPOINT_DIR):
        cfg.path(d).mkdir(parents=True, exist_ok=True)
    run_env = environment.merged_environment(env, sm)
    for key, value in cache.env.items():
        run_env.setdefault(key, value)  # the user's own cache directories win
    return program, [*program.command, *user_args], run_env, num_gpus


def _launch(job: Job) -> tuple[int, list[report.RankFailure]]:
    if job.plan.role == "outsider":
        return outsider_launcher.run(job)
    if job.plan.launcher == "horovod":
        return horovod_launcher.run(job)
    if job.plan.launcher == "torchrun":
        return torchrun_launcher.run(job)
    return run_local(job, stall_watch=False)


def run_job(root: Path | None) -> tuple[int, str | None, Path]:
    """The job's exit code, failure message (None on success) and the /opt/ml root."""
    env = dict(os.environ)
    root = config.ml_root(env) if root is None else root
    cfg = job = None
    grace = C.DEFAULT_TERM_GRACE
    try:
        the_settings = settings.load(env)
        grace = the_settings.term_grace
        cfg = config.load(root)
        print(f"byoc: {doctor.summary(env)}", flush=True)
        launcher, why = plan.choose_launcher(cfg.hyperparameters, the_settings.launcher)
        program, command, run_env, num_gpus = prepare(cfg, env, launcher, the_settings)
        interface = None
        if len(cfg.everyone) > 1:
            interface, note = netif.choose(cfg.network_interface)
            if note:
                print(f"byoc: {note}", flush=True)
        the_plan = plan.make_plan(
            cfg,
            command,
            launcher=launcher,
            num_gpus=num_gpus,
            settings=the_settings,
            interface=interface,
        )
        for key, value in the_plan.env.items():
            run_env.setdefault(key, value)  # the user's own settings win
        groups = f" (distribution groups' hosts; job: {cfg.everyone})" if cfg.outsiders else ""
        print(
            f"byoc: {the_plan.role} {cfg.current_host} of {cfg.hosts}{groups}; launcher "
            f"{launcher} ({why}); {the_plan.slots} process(es) per host, world size "
            f"{the_plan.world_size}; program {program.entry_point}",
            flush=True,
        )
        if len(cfg.everyone) > 1 and launcher != "none" and not procs.in_our_container():
            raise JobError(
                "a job of several hosts runs only in the image's container (byoc-init as PID "
                "1): it writes SSH configuration and opens ports, which it will not do on this "
                "machine",
                2,
            )
        job = Job(cfg, the_settings, the_plan, run_env, program.code_dir, shutdown=SHUTDOWN)
        code_, failures = _launch(job)
        if code_ != 0:
            message = failure_message(failures, code_, job, list(job.watcher.tail))
            return code_, job.attempts.failure_text(message), root
        return 0, None, root
    except settings.SettingsError as exc:
        return 2, f"Invalid setting: {exc}", root
    except config.ConfigError as exc:
        return 2, f"Invalid job configuration: {exc}", root
    except JobError as exc:
        if job is not None and (job.attempts.number > 1 or job.attempts.causes):
            return exc.exit_code, job.attempts.failure_text(str(exc)), root
        return exc.exit_code, str(exc), root
    except Terminated:
        procs.terminate_all(grace)
        where = f" Checkpoints: {root / C.CHECKPOINT_DIR}." if cfg else ""
        return (
            143,
            f"Stopped by SIGTERM (docker stop, spot interruption or StopTrainingJob) or SIGINT."
            f"{where}",
            root,
        )
    except Exception:  # noqa: BLE001 - our own crash is reported as such, with its traceback
        return 1, "Framework Error: byoc train crashed:\n" + traceback.format_exc(), root


def main(root: Path | None = None) -> int:
    signal.signal(signal.SIGTERM, SHUTDOWN.on_sigterm)
    signal.signal(signal.SIGINT, SHUTDOWN.on_sigterm)
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
