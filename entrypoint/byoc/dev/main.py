"""Development mode's set-up, in order, and its one exit point: `python -m byoc.dev`."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from byoc import constants as C
from byoc import ssh
from byoc.dev import files, keys, notebook, user
from byoc.dev.services import Services
from byoc.dev.settings import DevConfig, DevError, load


def _say(text: str) -> None:
    print(f"byoc-dev: {text}", flush=True)


def _venv_bin(name: str) -> str:
    return os.path.join(os.path.dirname(sys.executable), name)


def lab_path(open_path: str | None) -> str:
    """JupyterLab's URL path that opens open_path, or the Lab itself."""
    return f"/lab/tree/{open_path}" if open_path else "/lab"


def jupyter_command(cfg: DevConfig, open_path: str | None = None) -> list[str]:
    """JupyterLab's command line; open_path (relative to the root) is what `/` opens."""
    cmd = [
        _venv_bin("jupyter"),
        "lab",
        "--ServerApp.ip=0.0.0.0",
        f"--ServerApp.port={cfg.jupyter_port}",
        "--ServerApp.port_retries=0",  # a taken port is an error, not a silent other port
        "--ServerApp.open_browser=False",
        f"--ServerApp.root_dir={cfg.notebook_dir}",
        # No calls out: no announcements feed, no update check (the pop-ups asking are turned
        # off in the image's JupyterLab settings, docker/jupyter/overrides.json).
        "--LabApp.news_url=None",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
    ]
    if open_path:
        cmd.append(f"--LabApp.default_url={lab_path(open_path)}")
    if cfg.root:
        cmd.append("--allow-root")
    return cmd


def tensorboard_command(cfg: DevConfig) -> list[str]:
    return [
        _venv_bin("tensorboard"),
        f"--logdir={cfg.tensorboard_logdir}",
        "--host=0.0.0.0",
        f"--port={cfg.tensorboard_port}",
        # The Python reader: the data server's "experimental" path prints a notice each start.
        "--load_fast=false",
    ]


def start_sshd(cfg: DevConfig, home: Path, env: dict[str, str], services: Services) -> list[str]:
    """sshd with the authorized keys, or a warning why not."""
    authorized = keys.collect_keys(cfg, home)
    if not authorized:
        return [
            "sshd not started: no authorized keys. Pass "
            f'-e {C.AUTHORIZED_KEYS_ENV}="$(cat ~/.ssh/id_ed25519.pub)" or mount a file at '
            f"{C.DEFAULT_AUTHORIZED_KEYS_FILE} "
            f"(-v ~/.ssh/id_ed25519.pub:{C.DEFAULT_AUTHORIZED_KEYS_FILE}:ro)"
        ]
    runtime = Path(C.DEV_RUNTIME_DIR)
    runtime.mkdir(parents=True, exist_ok=True, mode=0o755)
    keys_file = files.write_authorized_keys(authorized, runtime / "authorized_keys")
    host_keys = ssh.generate_host_keys(Path(C.HOST_KEY_DIR))
    config = files.write_sshd_config(cfg, host_keys, keys_file, env, runtime / "sshd_config")
    files.write_profile(env, Path(C.PROFILE_SNIPPET))
    services.add("sshd", ssh.start_sshd(config))  # checks the config with sshd -t first
    host_key = ssh.fingerprint(ssh.host_public_keys(host_keys[:1])[0])
    _say(
        f"sshd on port {cfg.ssh_port}: {len(authorized)} authorized key(s), login as {cfg.user}; "
        f"host key {host_key}"
    )
    return []


def start_jupyter(cfg: DevConfig, home: Path, env: dict[str, str], services: Services) -> list[str]:
    """JupyterLab as cfg.user with the token in its environment; a warning about the notebook
    directory, if any."""
    warnings = [user.prepare_notebook_dir(cfg)]
    opened, warning = notebook.install(cfg)
    warnings.append(warning)
    open_path = opened.name if opened else None
    popen_kw, child_env = user.as_user(cfg, home, env)
    # Through the environment, not argv: the token stays out of `ps`.
    child_env[C.JUPYTER_TOKEN_ENV] = cfg.token
    services.start(
        "jupyter",
        jupyter_command(cfg, open_path),
        env=child_env,
        cwd=str(cfg.notebook_dir),
        **popen_kw,
    )
    path = lab_path(open_path)
    query = f"?token={cfg.token}" if cfg.token_generated else ""
    origin = "generated for this start" if cfg.token_generated else C.JUPYTER_TOKEN_ENV
    port = cfg.jupyter_port
    _say(
        f"JupyterLab on port {port} as {cfg.user}, notebooks in {cfg.notebook_dir}"
        + (f" (start with {open_path})" if open_path else "")
        + ":\n"
        f"    http://127.0.0.1:{port}{path}{query}\n"
        f"    http://{socket.gethostname()}:{port}{path}{query}\n"
        f"  (the host port is the one you published with -p; token: {origin})"
    )
    return [w for w in warnings if w]


def start_tensorboard(cfg: DevConfig, home: Path, env: dict[str, str], services: Services) -> None:
    """TensorBoard as cfg.user over the notebook root's runs/ (which may not exist yet)."""
    popen_kw, child_env = user.as_user(cfg, home, env)
    child_env.pop(C.JUPYTER_TOKEN_ENV, None)
    services.start(
        "tensorboard",
        tensorboard_command(cfg),
        env=child_env,
        cwd=str(home),
        stdout=subprocess.DEVNULL,  # its banner repeats what we say below
        **popen_kw,
    )
    _say(
        f"TensorBoard on port {cfg.tensorboard_port}, logs from "
        f"{cfg.tensorboard_logdir}: http://127.0.0.1:{cfg.tensorboard_port}/ "
        "(no login: publish it on loopback only)"
    )


def start(cfg: DevConfig, env: dict[str, str], services: Services) -> list[str]:
    """Set up and start the services; the warnings to show. DevError/SSHError on bad input."""
    warnings = []
    home = user.ensure_user(cfg)
    if cfg.peers and cfg.peer_key_file:
        keys.install_peer_key(cfg, home)
        files.write_peers_config(cfg, Path(C.PEERS_CLIENT_CONFIG))
    if cfg.sshd:
        warnings += start_sshd(cfg, home, env, services)
    if cfg.jupyter:
        warnings += start_jupyter(cfg, home, env, services)
    if cfg.tensorboard:
        start_tensorboard(cfg, home, env, services)
    return warnings


def main(env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    services = Services()
    services.catch_signals()  # before anything starts: a stop during set-up still stops cleanly
    try:
        cfg = load(env)
        warnings = start(cfg, env, services)
    except (DevError, ssh.SSHError, OSError) as exc:
        services.stop()
        print(f"byoc-dev: error: {exc}", file=sys.stderr, flush=True)
        return 2
    if services.stopping:
        services.stop()
        return 0
    for w in warnings:
        print(f"byoc-dev: warning: {w}", file=sys.stderr, flush=True)
    if not services.procs:
        print(
            "byoc-dev: nothing to run (no Jupyter, no sshd, no TensorBoard); give a command "
            "instead, e.g. `docker run -it IMAGE bash`",
            file=sys.stderr,
            flush=True,
        )
        return 2
    return services.wait()
