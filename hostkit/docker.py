"""The one way the host tools call Docker: the CLI named by $DOCKER, split on blanks, so
DOCKER='sudo docker' works everywhere; errors as HostError.

The shell tools (scripts/*.sh) split $DOCKER the same way (scripts/lib.sh); the container tests
talk to the engine through the Docker SDK and reach the CLI through this module.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

from hostkit import HostError

ROOT = Path(__file__).resolve().parents[1]
TIMED_OUT = 124  # HostError.code of a command past its timeout, as timeout(1) exits
STDERR_TAIL = 2000  # characters of a failed command's stderr that its error message carries
# What a busy container runs (Docker.busy): one core of matrix work, in the image's own torch.
BUSY = (
    "import torch\n"
    "torch.set_num_threads(1)\n"
    "a = torch.randn(384, 384)\n"
    "while True:\n"
    "    a = torch.tanh(a @ a)\n"
)


def command(text: str | None = None) -> list[str]:
    """The docker CLI as an argument list: text, else $DOCKER (empty counts as unset), else
    docker, split on blanks. HostError 127 when its program is not there, 126 when it cannot
    be run."""
    if text is None:
        text = os.environ.get("DOCKER", "")
    # Split on blanks, no quoting, as scripts/lib.sh splits it: one rule for both.
    cmd = text.split() or ["docker"]
    exe = cmd[0]
    if shutil.which(exe) is None:
        if os.sep in exe and os.path.exists(exe):
            raise HostError(f"DOCKER={exe}: not an executable file", 126)
        where = "does not exist" if os.sep in exe else "is not on PATH"
        raise HostError(
            f"no docker CLI: {exe} {where}; install Docker or set DOCKER=/path/to/docker", 127
        )
    return cmd


def build_client() -> str:
    """$DOCKER where set, else what `scripts/docker.sh client` finds (a client that can run
    BuildKit builds, as the Makefile's default DOCKER is), else docker."""
    if os.environ.get("DOCKER", "").strip():
        return os.environ["DOCKER"]
    found = subprocess.run(
        [str(ROOT / "scripts" / "docker.sh"), "client"],
        capture_output=True,
        text=True,
        check=False,
    )
    return found.stdout.strip() or "docker"


class Docker:
    """docker(*args) runs one docker command and returns its CompletedProcess (text)."""

    def __init__(self, text: str | None = None):
        self.cmd = command(text)

    @classmethod
    def _of(cls, cmd: list[str]) -> Docker:
        """A client whose command line is cmd (a checked one, with words added)."""
        other = cls.__new__(cls)
        other.cmd = cmd
        return other

    def __call__(
        self,
        *args: str,
        check: bool = True,
        timeout: float | None = None,
        input: str | None = None,
    ) -> subprocess.CompletedProcess:
        """check: a non-zero exit is a HostError (1) with docker's message. Past timeout
        seconds the command is killed and that is a HostError with code TIMED_OUT, whatever
        check says."""
        try:
            done = subprocess.run(
                [*self.cmd, *args],
                capture_output=True,
                text=True,
                errors="replace",
                check=False,
                timeout=timeout,
                input=input,
            )
        except subprocess.TimeoutExpired:
            raise HostError(f"docker {args[0]} took more than {timeout:g} s", TIMED_OUT) from None
        except OSError as exc:
            raise HostError(f"cannot run {self.cmd[0]}: {exc.strerror}", 126) from None
        if check and done.returncode != 0:
            detail = (done.stderr or "").strip()[-STDERR_TAIL:]
            raise HostError(f"docker {' '.join(args[:3])} failed: {detail}", 1)
        return done

    def with_options(self, *options: str) -> Docker:
        """This client with global options before every command (e.g. --config DIR)."""
        return Docker._of([*self.cmd, *options])

    def popen(self, *args: str, **kwargs) -> subprocess.Popen:
        try:
            return subprocess.Popen([*self.cmd, *args], **kwargs)
        except OSError as exc:
            raise HostError(f"cannot run {self.cmd[0]}: {exc.strerror}", 126) from None

    def output(self, *args: str) -> subprocess.Popen:
        """`docker ARGS` running, its output and errors as text lines on its stdout."""
        return self.popen(
            *args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
        )

    def exists(self, ref: str) -> bool:
        """The image ref is in the engine's store."""
        return self("image", "inspect", ref, check=False).returncode == 0

    def build(self, *args: str, **kwargs) -> subprocess.CompletedProcess:
        """`docker build ARGS` with BuildKit, as __call__ runs a command. DOCKER_BUILDKIT=1
        (which Docker < 23 needs) must reach the docker program itself, also through a wrapper
        that resets the environment (sudo): `env DOCKER_BUILDKIT=1` goes right before the
        program, the first word named docker* (else the last), as scripts/lib.sh does."""
        at = next(
            (i for i, w in enumerate(self.cmd[:-1]) if Path(w).name.startswith("docker")),
            len(self.cmd) - 1,
        )
        builder = Docker._of([*self.cmd[:at], "env", "DOCKER_BUILDKIT=1", *self.cmd[at:]])
        return builder("build", *args, **kwargs)

    def remove_labelled(self, label: str) -> None:
        """Remove every container (and its anonymous volumes) labelled label ("key=value")."""
        ids = self("ps", "-aq", "--filter", f"label={label}", check=False).stdout.split()
        if ids:
            self("rm", "-f", "-v", *ids, check=False)

    def busy(self, image: str, count: int, label: str) -> None:
        """count containers of image that each keep one core busy (a loaded machine for a soak),
        labelled label ("key=value"): remove_labelled(label) ends them."""
        for _ in range(count):
            self("run", "-d", "--label", label, "--entrypoint", "", image, "python", "-c", BUSY)

    def follow(self, name: str) -> subprocess.Popen:
        """`docker logs -f name`: the container's output and errors, as text lines on stdout."""
        return self.output("logs", "-f", name)

    def stream(self, name: str, prefix: str, out=None) -> threading.Thread:
        """Follow a container's output, each line as "<prefix> | line", in a thread."""
        out = out or sys.stdout

        def pump() -> None:
            try:
                proc = self.follow(name)
            except HostError as exc:
                out.write(f"cannot follow {name}'s output: {exc}\n")
                return
            assert proc.stdout is not None
            for line in proc.stdout:
                out.write(f"{prefix} | {line}")
                out.flush()
            proc.wait()

        t = threading.Thread(target=pump, daemon=True)
        t.start()
        return t
