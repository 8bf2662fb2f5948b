"""byoc-discover-hosts: the hosts of an elastic job that answer now, as horovodrun wants them.

horovodrun --host-discovery-script runs it every second and reads `host:slots` lines from its
stdout. The candidates come from BYOC_DISCOVER_HOSTS (`node{0..7}`, `a,b:4`), the file
BYOC_DISCOVER_FILE (one `host[:slots]` a line, re-read on every call, so a job's hosts can be
edited while it runs) and/or the program BYOC_DISCOVER_COMMAND, run on every call, whose output
has the file's form (the MPI Operator's /etc/mpi/discover_hosts.sh, which lists the Running
worker pods without slots). A candidate is listed when its name resolves and its SSH port
(BYOC_DISCOVER_PORT, else this container's sshd port SSH_PORT, else 22) answers with an SSH
banner within BYOC_DISCOVER_TIMEOUT, all probed at once: a stopped container (no DNS
name), a killed host (no answer) and a host whose sshd is not up yet (no banner) are left out, so
horovodrun never starts a worker where it cannot log in.

Patience: a host that answered before, whose name still resolves but whose sshd gives no answer
in time (a busy host), stays listed until it has been silent BYOC_DISCOVER_GRACE seconds, since
horovodrun takes a host missing from one answer for a lost one and resets every worker. A
definite no (its name unknown or not resolved in time, the connection refused, no route, not
SSH) drops it at once, as does its leaving the candidates.
What the calls saw is kept in a file in BYOC_DISCOVER_STATE_DIR, beside a log of every answer.

Exit 0 with the hosts listed (none is a valid answer: horovodrun waits for --min-np); exit 2
with a message naming the variable, file or option when the candidates or settings are bad.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import hashlib
import json
import math
import os
import re
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
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


@dataclass(frozen=True)
class Answer:
    """One probe of one host: `why` says what went wrong ("" when it answered); `gone` marks a
    definite no (the name does not resolve, nothing listens, no route, not an SSH server), as
    against a host that resolves but does not answer in time (a busy sshd), which patience
    covers."""

    why: str = ""
    gone: bool = False
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.why


_GONE_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH}


_RESOLVING = "resolving its name"


class _Progress:
    """How far one host's probe got: read at the deadline when the probe has not finished."""

    def __init__(self) -> None:
        self.phase = _RESOLVING
        self.answer: Answer | None = None


def answers(host: str, port: int, deadline: float, progress: _Progress) -> Answer:
    """Whether host resolves and host:port sends an SSH banner before the deadline, and if not,
    why. Of several addresses the best outcome counts (answered, then busy, then gone)."""
    start = time.monotonic()

    def done(why: str = "", gone: bool = False) -> Answer:
        return Answer(why, gone, time.monotonic() - start)

    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError) as exc:
        # The resolver says no: a stopped container, a deleted pod.
        return done(f"unknown name ({exc})", gone=True)
    best: Answer | None = None
    for family, kind, proto, _, address in infos:
        left = deadline - time.monotonic()
        if left <= 0:
            this = done(f"no answer while {progress.phase}")
        else:
            try:
                with socket.socket(family, kind, proto) as s:
                    progress.phase = "connecting"
                    s.settimeout(left)
                    s.connect(address)
                    progress.phase = "waiting for the SSH banner"
                    s.settimeout(max(deadline - time.monotonic(), 0.001))
                    banner = s.recv(8)
                if banner.startswith(b"SSH-"):
                    return done()
                # Nothing read: sshd closed before its banner, as it does past its MaxStartups.
                this = (
                    done(f"sent {banner!r}, not an SSH banner", gone=True)
                    if banner
                    else done("closed before the SSH banner")
                )
            except TimeoutError:
                this = done(f"no answer while {progress.phase}")
            except OSError as exc:
                said = exc.strerror or errno.errorcode.get(exc.errno or 0, "error")
                this = done(f"{said} while {progress.phase}", gone=exc.errno in _GONE_ERRNOS)
        if best is None or (best.gone and not this.gone):
            best = this
        if left <= 0:
            break
    return best or done("no address", gone=True)


def probe(cands: list[Candidate], port: int, timeout: float) -> dict[str, Answer]:
    """Every candidate's answer; all probes run at once, and the call returns by the deadline
    even where name resolution stalls (those threads are abandoned, their hosts not answering)."""
    deadline = time.monotonic() + timeout
    progress = {c.host: _Progress() for c in cands}

    def one(c: Candidate) -> None:
        progress[c.host].answer = answers(c.host, port, deadline, progress[c.host])

    threads = [threading.Thread(target=one, args=(c,), daemon=True) for c in cands]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
    # A name that does not resolve in time counts as gone: patience needs a sign of life, and a
    # stopped container's name can take longer than the timeout to fail where the resolver
    # forwards unknown names to a DNS server that is slow or out of reach.
    return {
        host: p.answer
        or Answer(f"no answer within {timeout:g} s while {p.phase}", p.phase == _RESOLVING, timeout)
        for host, p in progress.items()
    }


# --- patience: what earlier calls saw, kept between calls --------------------------------------
_STATE_VERSION = 1
_MAX_STATE_BYTES = 1 << 20


@dataclass(frozen=True)
class Seen:
    at: float  # time.monotonic() of the last call in which the host answered
    missed: int  # probes it has missed since


def boot_id() -> str:
    """This boot's id: monotonic times from another boot mean nothing ("" where unknown)."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def scope(cfg: S.DiscoverySettings) -> str:
    """What a memory belongs to: the candidates' sources and the port probed."""
    return json.dumps([cfg.hosts, cfg.file, cfg.command, cfg.port])


def state_paths(cfg: S.DiscoverySettings) -> tuple[Path, Path]:
    """The memory and the log of these candidates, in the state directory, which is made
    (mode 700) if missing and must be a directory of this user's that nobody else can write."""
    where = f"{C.DISCOVER_STATE_DIR_ENV}={cfg.state_dir}"
    directory = Path(cfg.state_dir)
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        st = os.lstat(directory)
    except OSError as exc:
        raise DiscoveryError(f"{where}: cannot be made ({exc.strerror})") from None
    if not stat.S_ISDIR(st.st_mode):
        raise DiscoveryError(f"{where}: not a directory (a link or a file)")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise DiscoveryError(f"{where}: must belong to this user and be writable by no one else")
    name = "discover-" + hashlib.sha256(scope(cfg).encode()).hexdigest()[:16]
    return directory / f"{name}.json", directory / f"{name}.log"


def _valid_hosts(hosts: object, now: float) -> dict[str, Seen] | None:
    if not isinstance(hosts, dict) or len(hosts) > C.MAX_DISCOVER_HOSTS:
        return None
    out = {}
    for host, entry in hosts.items():
        if not (isinstance(host, str) and _HOST_RE.match(host) and isinstance(entry, dict)):
            return None
        at, missed = entry.get("at"), entry.get("missed")
        if not (isinstance(at, float) and math.isfinite(at) and at <= now):
            return None
        if not (type(missed) is int and missed >= 0):
            return None
        out[host] = Seen(at, missed)
    return out


def load_memory(path: Path, scope_: str, boot: str, now: float) -> tuple[dict[str, Seen], str]:
    """The hosts earlier calls saw, and a message when the file was there but is not ours or not
    whole (then it is ignored: patience starts afresh, as for a new job)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return {}, ""
    except OSError as exc:
        return {}, f"{path}: cannot be read ({exc.strerror}); ignored"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
            return {}, f"{path}: not a file of this user's; ignored"
        data = os.read(fd, _MAX_STATE_BYTES + 1)
    except OSError as exc:
        return {}, f"{path}: cannot be read ({exc.strerror}); ignored"
    finally:
        os.close(fd)
    try:
        doc = json.loads(data) if len(data) <= _MAX_STATE_BYTES else None
    except ValueError:  # also UnicodeDecodeError
        doc = None
    if not isinstance(doc, dict):
        return {}, f"{path}: not a state file of byoc-discover-hosts; ignored"
    if doc.get("version") != _STATE_VERSION or doc.get("scope") != scope_:
        return {}, f"{path}: written for other candidates or another version; ignored"
    if doc.get("boot") != boot:
        return {}, f"{path}: written before this machine restarted; ignored"
    hosts = _valid_hosts(doc.get("hosts"), now)
    if hosts is None:
        return {}, f"{path}: its hosts are malformed; ignored"
    return hosts, ""


def save_memory(path: Path, scope_: str, boot: str, seen: dict[str, Seen]) -> str:
    """Write the memory whole or not at all (a temporary file renamed over it): "" or why not."""
    doc = {
        "version": _STATE_VERSION,
        "scope": scope_,
        "boot": boot,
        "hosts": {h: {"at": s.at, "missed": s.missed} for h, s in seen.items()},
    }
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, path)
    except OSError as exc:
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
        return f"{path}: cannot be written ({exc.strerror}); this call's answers are not kept"
    return ""


def append_log(path: Path, line: str) -> str:
    """One line at the end of the log; at DISCOVER_LOG_MAX_BYTES it becomes <log>.1 (the one
    older file kept) and a new log starts. "" or why not."""
    try:
        with contextlib.suppress(FileNotFoundError):
            if os.lstat(path).st_size >= C.DISCOVER_LOG_MAX_BYTES:
                os.replace(path, path.with_name(path.name + ".1"))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "a") as f:
            f.write(line + "\n")
    except OSError as exc:
        return f"{path}: cannot be written ({exc.strerror})"
    return ""


@dataclass
class Outcome:
    """One call's decision."""

    listed: list[Candidate]
    seen: dict[str, Seen]  # the memory for the next call
    events: list[str]  # changes worth a line in horovodrun's output
    log: list[str]  # what each host known or answering did, for the log


def remember(
    cands: list[Candidate],
    found: dict[str, Answer],
    seen: dict[str, Seen],
    now: float,
    grace: float,
) -> Outcome:
    """Who is listed: a host that answers; and one that answered before, missed this probe
    without a definite no (`Answer.gone`) and has been silent less than `grace` seconds. A
    candidate that never answered is not listed, nor one no longer among the candidates."""
    out = Outcome([], {}, [], [])
    for c in cands:
        a, before = found[c.host], seen.get(c.host)
        entry = f"{c.host}:{c.slots}"
        if a.ok:
            out.listed.append(c)
            out.seen[c.host] = Seen(now, 0)
            if before is None:
                out.log.append(f"{entry} new {a.seconds:.3f}s")
                continue
            out.log.append(f"{entry} ok {a.seconds:.3f}s")
            if before.missed:
                out.events.append(
                    f"{c.host} answers again, after {before.missed} missed probe(s) and "
                    f"{now - before.at:.1f} s"
                )
            continue
        if before is None:
            continue  # never answered: not a host of this job yet
        silent = now - before.at
        if not a.gone and silent < grace:
            out.listed.append(c)
            out.seen[c.host] = Seen(before.at, before.missed + 1)
            out.log.append(f"{entry} kept silent={silent:.1f}s ({a.why})")
            if not before.missed:
                out.events.append(
                    f"{c.host} missed a probe ({a.why}); still listed until it has been silent "
                    f"{grace:g} s ({C.DISCOVER_GRACE_ENV})"
                )
            continue
        why = a.why if a.gone else f"silent {silent:.1f} s, {grace:g} s allowed; {a.why}"
        out.log.append(f"{entry} dropped ({why})")
        out.events.append(f"{c.host} dropped: {why}")
    return out


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
    p.add_argument(
        "--grace",
        default=None,
        help=f"seconds a known host stays listed while silent ({C.DISCOVER_GRACE_ENV})",
    )
    p.add_argument(
        "--state-dir",
        default=None,
        help=f"where calls keep what they saw, and the log ({C.DISCOVER_STATE_DIR_ENV})",
    )
    a = p.parse_args(argv)
    # The options go through the same checks as the variables, named as options.
    env = {
        "--slots": a.slots if a.slots is not None else "",
        "--port": a.port if a.port is not None else "",
        "--timeout": a.timeout if a.timeout is not None else "",
        "--grace": a.grace if a.grace is not None else "",
        "--state-dir": a.state_dir if a.state_dir is not None else "",
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
        grace=S.seconds(env, "--grace", 0, high=C.MAX_DISCOVER_GRACE, zero=True)
        if a.grace is not None
        else cfg.grace,
        state_dir=(S.directory(env, "--state-dir") or cfg.state_dir)
        if a.state_dir is not None
        else cfg.state_dir,
    )


def main(argv: list[str] | None = None, env: dict[str, str] | None = None) -> int:
    env = dict(os.environ if env is None else env)
    try:
        cfg = parse_args(sys.argv[1:] if argv is None else argv, S.load_discovery(env))
        cands = candidates(cfg, cfg.slots or count_gpus() or 1)
        state, log = state_paths(cfg)
    except S.SettingsError as exc:
        print(f"byoc-discover-hosts: error: {exc}", file=sys.stderr, flush=True)
        return 2
    now, boot = time.monotonic(), boot_id()
    stamp = datetime.fromtimestamp(time.time(), timezone.utc).isoformat(timespec="milliseconds")
    seen, problem = load_memory(state, scope(cfg), boot, now)
    found = probe(cands, cfg.port, cfg.timeout)
    out = remember(cands, found, seen, now, cfg.grace)
    took = time.monotonic() - now
    line = f"{stamp} {took:.3f}s listed={len(out.listed)} " + (" ".join(out.log) or "-")
    notes = [*out.events, problem, save_memory(state, scope(cfg), boot, out.seen)]
    notes.append(append_log(log, line))
    for note in filter(None, notes):
        print(f"byoc-discover-hosts: {note}", file=sys.stderr)
    sys.stderr.flush()
    sys.stdout.write("".join(f"{c.host}:{c.slots}\n" for c in out.listed))
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
