"""byoc-discover-hosts: the hosts of an elastic job that answer now, as horovodrun wants them.

horovodrun --host-discovery-script runs it every second and reads `host:slots` lines from its
stdout. The candidates come from BYOC_DISCOVER_HOSTS (`node{0..7}`, `a,b:4`), the file
BYOC_DISCOVER_FILE (one `host[:slots]` a line, re-read on every call, so a job's hosts can be
edited while it runs) and/or the program BYOC_DISCOVER_COMMAND, run on every call, whose output
has the file's form (the MPI Operator's /etc/mpi/discover_hosts.sh, which lists the Running
worker pods without slots). A candidate is listed when its name resolves and its SSH port answers
with an SSH banner within BYOC_DISCOVER_TIMEOUT, all probed at once: a stopped container (no DNS
name), a killed host (no answer) and a host whose sshd is not up yet (no banner) are left out, so
horovodrun never starts a worker where it cannot log in.

Exit 0 with the hosts that answer (none is a valid answer: horovodrun waits for --min-np);
exit 2 with a message naming the variable, file or option when the candidates are malformed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from byoc import constants as C
from byoc import settings as S
from byoc.plan import count_gpus

# An RFC 1123 host name (labels of letters, digits and -) or an IPv4 address; no user@, no port.
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_RE = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$")
_RANGE_RE = re.compile(r"^(?P<pre>[^{}]*)\{(?P<lo>\d{1,4})\.\.(?P<hi>\d{1,4})\}(?P<post>[^{}]*)$")
_MAX_FILE_BYTES = 1 << 20


class DiscoveryError(S.SettingsError):
    """Malformed candidates: the message names where they came from."""


@dataclass(frozen=True)
class Candidate:
    host: str
    slots: int


def _expand(name: str, source: str) -> list[str]:
    """`node{0..3}` -> node0..node3 (the one range form); any other name as it is."""
    m = _RANGE_RE.match(name)
    if not m:
        if "{" in name or "}" in name:
            raise DiscoveryError(f"{source}: {name!r}: the only range form is prefix{{0..7}}suffix")
        return [name]
    lo, hi = int(m["lo"]), int(m["hi"])
    if lo > hi or hi - lo >= C.MAX_DISCOVER_HOSTS:
        raise DiscoveryError(
            f"{source}: {name!r}: a range from low to high, at most {C.MAX_DISCOVER_HOSTS} names"
        )
    width = len(m["lo"]) if m["lo"].startswith("0") and len(m["lo"]) > 1 else 0
    return [f"{m['pre']}{i:0{width}d}{m['post']}" for i in range(lo, hi + 1)]


def parse_entries(entries: list[str], source: str, default_slots: int) -> list[Candidate]:
    """`host[:slots]` entries (ranges expanded) -> candidates, each host once, in order."""
    out: dict[str, Candidate] = {}
    for entry in entries:
        name, sep, slots_text = entry.partition(":")
        slots = default_slots
        if sep:
            if not slots_text.isdigit() or not 1 <= int(slots_text) <= C.MAX_SLOTS_PER_HOST:
                raise DiscoveryError(
                    f"{source}: {entry!r}: slots must be a whole number from 1 to "
                    f"{C.MAX_SLOTS_PER_HOST}"
                )
            slots = int(slots_text)
        for host in _expand(name, source):
            if not _HOST_RE.match(host):
                raise DiscoveryError(f"{source}: {host!r} is not a host name or IPv4 address")
            out.setdefault(host, Candidate(host, slots))
            if len(out) > C.MAX_DISCOVER_HOSTS:
                raise DiscoveryError(f"{source}: more than {C.MAX_DISCOVER_HOSTS} hosts")
    return list(out.values())


def parse_lines(text: str, where: str, default_slots: int) -> list[Candidate]:
    """One `host[:slots]` a line, `#` comments and blank lines ignored; `where` names the source
    in messages ("<file>, line 3")."""
    out: dict[str, Candidate] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if len(line.split()) != 1:
            raise DiscoveryError(f"{where}, line {number}: one `host[:slots]` a line, not {line!r}")
        for c in parse_entries([line], f"{where}, line {number}", default_slots):
            out.setdefault(c.host, c)
        if len(out) > C.MAX_DISCOVER_HOSTS:
            raise DiscoveryError(f"{where}: more than {C.MAX_DISCOVER_HOSTS} hosts")
    return list(out.values())


def _decode(data: bytes, source: str) -> str:
    if len(data) > _MAX_FILE_BYTES:
        raise DiscoveryError(f"{source}: larger than {_MAX_FILE_BYTES} bytes")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise DiscoveryError(f"{source}: not UTF-8 text") from None


def read_file(path: Path, default_slots: int) -> list[Candidate]:
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DiscoveryError(f"{C.DISCOVER_FILE_ENV}={path}: cannot be read: {exc}") from None
    return parse_lines(_decode(data, f"{C.DISCOVER_FILE_ENV}={path}"), str(path), default_slots)


def _drain(stream, keep: int, into: list[bytes]) -> None:
    """Read a pipe to its end as data comes, keeping at most `keep` + 1 bytes (a program that
    floods its output costs no memory; the surplus byte says it overflowed)."""
    held = 0
    while chunk := stream.read1(65536):
        if held <= keep:
            into.append(chunk[: keep + 1 - held])
            held += len(into[-1])


def _kill_group(proc: subprocess.Popen) -> None:
    """The program and whatever it left behind (its own session: nothing else)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_command(command: str, default_slots: int, timeout: float) -> list[Candidate]:
    """The candidates a discovery program prints: run without a shell, in a session of its own,
    no input, bounded in time and output; a failure names the variable and the program."""
    source = f"{C.DISCOVER_COMMAND_ENV}={command}"
    if not Path(command).is_absolute() or any(c.isspace() for c in command):
        raise DiscoveryError(
            f"{source}: the absolute path of a program, no arguments (it runs without a shell)"
        )
    try:
        proc = subprocess.Popen(
            [command],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except OSError as exc:
        raise DiscoveryError(f"{source}: cannot be run: {exc.strerror or exc}") from None
    out: list[bytes] = []
    err: list[bytes] = []
    readers = [
        threading.Thread(target=_drain, args=(proc.stdout, _MAX_FILE_BYTES, out), daemon=True),
        threading.Thread(target=_drain, args=(proc.stderr, 4096, err), daemon=True),
    ]
    for t in readers:
        t.start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        code = None
    # Whatever it started goes with it; then its pipes close and the readers end.
    _kill_group(proc)
    proc.wait()
    for t in readers:
        t.join(2)
    held_open = any(t.is_alive() for t in readers)
    proc.stdout.close()
    proc.stderr.close()
    if code is None:
        raise DiscoveryError(f"{source}: no answer within {timeout:g} s")
    if held_open:
        raise DiscoveryError(f"{source}: exited, but something it started keeps its output open")
    if code != 0:
        said = b"".join(err).decode(errors="replace").strip()[-400:]
        raise DiscoveryError(f"{source}: exited {code}" + (f": {said}" if said else ""))
    text = _decode(b"".join(out), f"{source}: its output")
    return parse_lines(text, f"{command}'s output", default_slots)


def candidates(cfg: S.DiscoverySettings, default_slots: int) -> list[Candidate]:
    found: dict[str, Candidate] = {}
    if cfg.hosts:
        entries = [e for e in re.split(r"[\s,]+", cfg.hosts) if e]
        for c in parse_entries(entries, C.DISCOVER_HOSTS_ENV, default_slots):
            found.setdefault(c.host, c)
    if cfg.file:
        for c in read_file(Path(cfg.file), default_slots):
            found.setdefault(c.host, c)
    if cfg.command:
        for c in run_command(cfg.command, default_slots, C.DISCOVER_COMMAND_TIMEOUT):
            found.setdefault(c.host, c)
    if not (cfg.hosts or cfg.file or cfg.command):
        raise DiscoveryError(
            f"no candidates: set {C.DISCOVER_HOSTS_ENV} (e.g. 'node{{0..7}}'), "
            f"{C.DISCOVER_FILE_ENV} (a file of host[:slots] lines) or {C.DISCOVER_COMMAND_ENV} "
            "(a program that prints them), or pass --hosts/--file/--command"
        )
    return list(found.values())


def answers(host: str, port: int, deadline: float) -> bool:
    """True when host resolves and host:port sends an SSH banner before the deadline."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return False
    for family, kind, proto, _, address in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        try:
            with socket.socket(family, kind, proto) as s:
                s.settimeout(left)
                s.connect(address)
                s.settimeout(max(deadline - time.monotonic(), 0.001))
                return s.recv(8).startswith(b"SSH-")
        except OSError:
            continue
    return False


def probe(cands: list[Candidate], port: int, timeout: float) -> list[Candidate]:
    """The candidates that answer, in candidate order; every probe runs at once, and the call
    returns by the deadline even where name resolution stalls (those threads are abandoned)."""
    deadline = time.monotonic() + timeout
    ok: dict[str, bool] = {}
    lock = threading.Lock()

    def one(c: Candidate) -> None:
        result = answers(c.host, port, deadline)
        with lock:
            ok[c.host] = result

    threads = [threading.Thread(target=one, args=(c,), daemon=True) for c in cands]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    with lock:
        return [c for c in cands if ok.get(c.host)]


def parse_args(argv: list[str], cfg: S.DiscoverySettings) -> S.DiscoverySettings:
    p = argparse.ArgumentParser(
        prog="byoc-discover-hosts",
        description="Print the hosts that answer now, one host:slots a line "
        "(horovodrun --host-discovery-script). Options override the BYOC_DISCOVER_* variables.",
    )
    p.add_argument("--hosts", default=cfg.hosts, help=f"candidates ({C.DISCOVER_HOSTS_ENV})")
    p.add_argument("--file", default=cfg.file, help=f"a file of candidates ({C.DISCOVER_FILE_ENV})")
    p.add_argument(
        "--command",
        default=cfg.command,
        help=f"a program that prints them ({C.DISCOVER_COMMAND_ENV})",
    )
    p.add_argument("--slots", default=None, help=f"default slots ({C.DISCOVER_SLOTS_ENV})")
    p.add_argument("--port", default=None, help=f"SSH port to probe ({C.DISCOVER_PORT_ENV})")
    p.add_argument("--timeout", default=None, help=f"seconds ({C.DISCOVER_TIMEOUT_ENV})")
    a = p.parse_args(argv)
    # The options go through the same checks as the variables, named as options.
    env = {
        "--slots": a.slots if a.slots is not None else "",
        "--port": a.port if a.port is not None else "",
        "--timeout": a.timeout if a.timeout is not None else "",
    }
    return S.DiscoverySettings(
        hosts=a.hosts.strip(),
        file=a.file.strip(),
        command=a.command.strip(),
        slots=(S.integer(env, "--slots", 0, 1, C.MAX_SLOTS_PER_HOST) or None)
        if a.slots is not None
        else cfg.slots,
        port=S.port(env, "--port", 0) if a.port is not None else cfg.port,
        timeout=S.seconds(env, "--timeout", 0, high=60) if a.timeout is not None else cfg.timeout,
    )


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv, S.load_discovery(env))
        cands = candidates(cfg, cfg.slots or count_gpus() or 1)
    except S.SettingsError as exc:
        print(f"byoc-discover-hosts: error: {exc}", file=sys.stderr, flush=True)
        return 2
    lines = [f"{c.host}:{c.slots}" for c in probe(cands, cfg.port, cfg.timeout)]
    sys.stdout.write("".join(f"{line}\n" for line in lines))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
