"""The leader's small HTTP service: hosts join the job, swap public keys, learn its state.

POST /join             {"host", "user_key", "host_keys"}: a worker joins (keys may be empty when
                       the launcher needs no SSH). Refused (403) unless the request comes from an
                       address the claimed host name resolves to, so no other machine can
                       slip a key in under a job host's name.
GET  /peers?host=NAME  {"complete": bool, "hosts": {name: {"addresses", "user_key",
                       "host_keys"}}}: everything every host needs to trust the others, once
                       all have joined.
GET  /status?host=NAME {"state": "starting"|"running"|"restarting"|"done", "exit_code": N|null,
                       "stacks": N, "attempt": N}: "restarting": attempt N failed and another
                       follows (byoc.restarts); each host ends what is left of its ranks, then
                       says so (/ready)
POST /report           {"host", "exit_code", "failure", "attempt"}: a worker's own result of an
                       attempt (torchrun, where each host runs its own launcher); one of an
                       earlier attempt is dropped.
POST /ready            {"host", "attempt"}: nothing is left of the attempt's processes on the
                       host; it waits for the next.
POST /stacks           {"host", "ask", "ranks": [{"rank", "frames"}]}: a host's answer to the
                       leader's ask number `ask` (GET /status says "stacks": the latest ask) for
                       its ranks' stacks (byoc.stall), once it has dumped them.
The leader remembers which workers have seen the complete peers and the final state, so it can
go on (or leave) as soon as each knows. Only the job's hosts reach it: SageMaker isolates a job's
network; locally, the job's network.
"""

from __future__ import annotations

import http.client
import json
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from byoc.deadline import Deadline

# The routes, spelled here only: the server below answers them, Client asks them.
JOIN, PEERS, STATUS, REPORT = "/join", "/peers", "/status", "/report"
STACKS, READY = "/stacks", "/ready"
MAX_BODY = 64 * 1024  # a join or a report is a few KB
# One OpenSSH public key: type, base64 blob, maybe a printable comment; no options, no newline.
PUBLIC_KEY = re.compile(
    r"(ssh-ed25519|ssh-rsa|ecdsa-sha2-nistp(256|384|521)) [A-Za-z0-9+/]+={0,3}( [ -~]*)?"
)


def _rank_stack(answer) -> bool:
    """Whether answer is one rank's stack as byoc.stall.dump_host makes it."""
    if not isinstance(answer, dict) or type(answer.get("rank")) is not int:
        return False
    frames = answer.get("frames")
    return isinstance(frames, list) and all(isinstance(f, str) for f in frames)


class LeaderLost(Exception):
    """The leader did not answer in time; the message says for how long and why."""


class Refused(ValueError):
    """The leader answered with a refusal (HTTP 4xx): final."""


def host_addresses(host: str) -> set[str]:
    try:
        return {info[4][0] for info in socket.getaddrinfo(host, None, socket.AF_INET)}
    except (OSError, UnicodeError):
        return set()


class JobState:
    """What the leader knows of the job; every method is safe to call from the HTTP threads."""

    def __init__(self, hosts: list[str], resolve: Callable[[str], set[str]] = host_addresses):
        self.hosts = list(hosts)
        self.resolve = resolve
        self.state = "starting"
        self.exit_code: int | None = None
        self.members: dict[str, dict] = {}
        self.reports: dict[str, dict] = {}
        self.seen_peers: set[str] = set()
        self.seen_done: set[str] = set()
        self.stacks_asked = 0  # the leader's latest ask for every host's stacks
        self.stacks: dict[str, list] = {}  # each host's answer to it
        self.attempt = 1  # the job's attempt (byoc.restarts): 1, then one more per restart
        self.ready: set[str] = set()  # hosts with nothing left of the failed attempt
        self.lock = threading.Condition()

    def set(self, state: str, exit_code: int | None = None) -> None:
        with self.lock:
            self.state, self.exit_code = state, exit_code
            self.lock.notify_all()

    def begin(self, attempt: int) -> None:
        """Attempt `attempt` runs: the reports and readiness of the one before are forgotten."""
        with self.lock:
            self.state, self.exit_code, self.attempt = "running", None, attempt
            self.reports, self.ready = {}, set()
            self.lock.notify_all()

    def claim(self, host: object, source: str | None) -> tuple[int, str] | None:
        """Whether a request from address source may speak for host (None: it may)."""
        if not isinstance(host, str) or host not in self.hosts:
            return 403, f"{host!r} is not a host of this job"
        if source is None:
            return None
        addresses = self.resolve(host)
        if not addresses:
            return 503, f"{host} does not resolve here yet"
        if source not in addresses:
            return 403, f"{host} resolves to {sorted(addresses)}, not to the caller {source}"
        return None

    def join(self, member: dict, source: str | None) -> tuple[int, str] | None:
        """Record a host's keys; None, or the HTTP status and reason of the refusal (503: try
        again, the name does not resolve here yet)."""
        host = member.get("host")
        refused = self.claim(host, source)
        if refused:
            return refused
        addresses = self.resolve(host) | ({source} if source else set())
        user_key = member.get("user_key") or ""
        host_keys = member.get("host_keys") or []
        if (
            not isinstance(host_keys, list)
            or not all(
                isinstance(k, str) and PUBLIC_KEY.fullmatch(k) for k in [*host_keys, user_key] if k
            )
            or not isinstance(user_key, str)
        ):
            return 400, "user_key and host_keys must be OpenSSH public keys, one line each"
        with self.lock:
            self.members[host] = {
                "addresses": sorted(addresses),
                "user_key": user_key,
                "host_keys": host_keys,
            }
            self.lock.notify_all()
        return None

    def peers(self, host: str | None) -> dict:
        with self.lock:
            complete = all(h in self.members for h in self.hosts)
            if complete and host:
                self.seen_peers.add(host)
                self.lock.notify_all()
            return {
                "complete": complete,
                "hosts": dict(self.members) if complete else {},
                "state": self.state,
                "exit_code": self.exit_code,
            }

    def snapshot(self, host: str | None) -> dict:
        with self.lock:
            if host and self.state == "done":
                self.seen_done.add(host)
                self.lock.notify_all()
            return {
                "state": self.state,
                "exit_code": self.exit_code,
                "stacks": self.stacks_asked,
                "attempt": self.attempt,
            }

    def ask_stacks(self) -> None:
        """Ask every host for its ranks' stacks (they see it in their next /status)."""
        with self.lock:
            self.stacks_asked += 1
            self.stacks = {}
            self.lock.notify_all()

    def answer_stacks(self, answer: dict, source: str | None) -> tuple[int, str] | None:
        host = answer.get("host")
        refused = self.claim(host, source)
        if refused:
            return refused
        ranks = answer.get("ranks")
        if not isinstance(ranks, list) or not all(_rank_stack(r) for r in ranks):
            return 400, 'ranks must be a list of {"rank": N, "frames": [text, ...]}'
        with self.lock:
            if answer.get("ask") == self.stacks_asked:  # a late answer to an older ask is dropped
                self.stacks[host] = ranks
                self.lock.notify_all()
        return None

    def answered_stacks(self) -> dict[str, list]:
        with self.lock:
            return dict(self.stacks)

    def report(self, result: dict, source: str | None) -> tuple[int, str] | None:
        host = result.get("host")
        refused = self.claim(host, source)
        if refused:
            return refused
        with self.lock:
            if result.get("attempt", self.attempt) == self.attempt:  # not a late one
                self.reports[host] = result
                self.lock.notify_all()
        return None

    def answer_ready(self, answer: dict, source: str | None) -> tuple[int, str] | None:
        """A host's word that nothing is left of the failed attempt there; a late or early
        one (another attempt, or no restart under way) is dropped."""
        host = answer.get("host")
        refused = self.claim(host, source)
        if refused:
            return refused
        with self.lock:
            if self.state == "restarting" and answer.get("attempt") == self.attempt:
                self.ready.add(host)
                self.lock.notify_all()
        return None

    def wait_for(self, what: Callable[[], set[str]], timeout: float, stop=None) -> set[str]:
        """Wait until what() (called under the lock) is empty; what is left after timeout, or
        as soon as stop (a threading.Event) is set."""
        deadline = Deadline(timeout, "the leader's wait")
        with self.lock:
            while True:
                missing = what()
                if not missing or deadline.expired() or (stop is not None and stop.is_set()):
                    return missing
                self.lock.wait(min(deadline.left(), 0.2))

    def fill_addresses(self, host: str, addresses: set[str]) -> None:
        """host's addresses where its join recorded none (its own name does not resolve yet)."""
        with self.lock:
            member = self.members.get(host)
            if member is not None and not member["addresses"]:
                member["addresses"] = sorted(addresses)
                self.lock.notify_all()

    def reported(self) -> dict[str, dict]:
        """Every worker's own result so far ({host: result}), a copy."""
        with self.lock:
            return dict(self.reports)

    def failed_hosts(self) -> list[str]:
        """Workers that reported a failure."""
        with self.lock:
            return sorted(h for h, r in self.reports.items() if r.get("exit_code") not in (0, None))

    def wait_for_failure(self, stop: Callable[[], bool]) -> list[str]:
        """Wait until a worker has reported a failure (those workers) or stop() is true ([])."""
        with self.lock:
            while True:
                failed = self.failed_hosts()
                if failed or stop():
                    return failed
                self.lock.wait(0.5)

    def missing_members(self, hosts: list[str]) -> Callable[[], set[str]]:
        return lambda: set(hosts) - set(self.members)

    def missing_peers_seen(self, hosts: list[str]) -> Callable[[], set[str]]:
        return lambda: set(hosts) - self.seen_peers

    def missing_done_seen(self, hosts: list[str]) -> Callable[[], set[str]]:
        """Of hosts, those that joined and have not seen "done": one that never joined is not
        waited for (a worker that never started would hold the leader's end for nothing)."""
        return lambda: (set(hosts) & set(self.members)) - self.seen_done

    def missing_reports(self, hosts: list[str]) -> Callable[[], set[str]]:
        return lambda: set(hosts) - set(self.reports)

    def missing_stacks(self, hosts: list[str]) -> Callable[[], set[str]]:
        return lambda: set(hosts) - set(self.stacks)

    def missing_ready(self, hosts: list[str]) -> Callable[[], set[str]]:
        return lambda: set(hosts) - self.ready


def serve(state: JobState, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):  # noqa: N802 - the http.server API
            url = urllib.parse.urlparse(self.path)
            host = urllib.parse.parse_qs(url.query).get("host", [None])[0]
            if host and state.claim(host, self.client_address[0]):
                host = None  # answered, but not counted as that host having seen it
            if url.path == STATUS:
                self._send(200, state.snapshot(host))
            elif url.path == PEERS:
                self._send(200, state.peers(host))
            else:
                self._send(404, {"error": "no such path"})

        def do_POST(self):  # noqa: N802 - the http.server API
            url = urllib.parse.urlparse(self.path)
            try:
                length = int(self.headers.get("Content-Length", "0"))
                if not 0 < length <= MAX_BODY:
                    raise ValueError(f"a body of {length} bytes")
                body = json.loads(self.rfile.read(length))
                if not isinstance(body, dict):
                    raise ValueError("not a JSON object")
            except ValueError as exc:
                self._send(400, {"error": f"bad request: {exc}"})
                return
            if url.path == JOIN:
                refused = state.join(body, self.client_address[0])
            elif url.path == REPORT:
                refused = state.report(body, self.client_address[0])
            elif url.path == STACKS:
                refused = state.answer_stacks(body, self.client_address[0])
            elif url.path == READY:
                refused = state.answer_ready(body, self.client_address[0])
            else:
                self._send(404, {"error": "no such path"})
                return
            if refused:
                self._send(refused[0], {"error": refused[1]})
            else:
                self._send(200, {})

        def log_message(self, *args):  # quiet: workers poll often
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # noqa: S104 - peers connect
    server.daemon_threads = True
    # Its threads (and the request threads they start) take no signal: in PID 1 a SIGCHLD or
    # SIGTERM delivered to one of them would be lost to the supervisor's sigwait.
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    try:
        threading.Thread(target=server.serve_forever, daemon=True, name="coordinator").start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
    return server


def request(host: str, port: int, path: str, body: dict | None = None, timeout=3.0) -> dict:
    """One GET (or POST of body) to the leader; its JSON object. A refusal (HTTP 4xx) raises
    Refused; anything else that is no answer (5xx, a connection cut mid-answer, not a JSON
    object) raises ConnectionError, which poll() retries like silence."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(  # noqa: S310 - http to the job's own leader
        f"http://{host}:{port}{path}", data=data, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310
            answer = json.loads(r.read())
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:300]
        message = f"the leader answered {path} with HTTP {exc.code} {detail}"
        if exc.code >= 500:
            raise ConnectionError(message) from exc
        raise Refused(message) from exc
    except (http.client.HTTPException, ValueError) as exc:
        raise ConnectionError(f"a broken answer to {path} ({exc!r})") from exc
    if not isinstance(answer, dict):
        raise ConnectionError(f"the answer to {path} is no JSON object")
    return answer


def poll(
    leader: str,
    port: int,
    path: str,
    done: Callable[[dict], bool],
    *,
    appear: float,
    lost_after: float,
    body: dict | None = None,
) -> dict:
    """Ask the leader until done(answer): bounded by `appear` seconds until it first answers,
    then by `lost_after` seconds of silence, and at least two failed tries in a row (a leader
    busy enough to let one request time out is slow, not gone). A refusal (Refused) is final."""
    silence = Deadline(appear, "the wait for the leader")
    answered, failed = False, 0
    while True:
        try:
            answer = request(leader, port, path, body)
            answered, failed = True, 0
            silence = Deadline(lost_after, "the leader's silence")
            if done(answer):
                return answer
        except OSError as exc:
            failed += 1
            if silence.expired() and failed >= 2:
                why = (
                    f"unreachable for {lost_after:.0f} s"
                    if answered
                    else f"did not answer on port {port} within {appear:.0f} s"
                )
                raise LeaderLost(f"leader {leader} {why} ({exc})") from exc
        time.sleep(0.25)


class Client:
    """A host's side of the wire: every call asks the leader until it has the answer wanted,
    bounded as poll() is (appear, then lost_after); LeaderLost or Refused otherwise."""

    def __init__(self, leader: str, port: int, me: str, *, appear: float, lost_after: float):
        self.leader, self.port, self.me = leader, port, me
        self.appear, self.lost_after = appear, lost_after
        self._as_me = "?" + urllib.parse.urlencode({"host": me})

    def _ask(self, path: str, until: Callable[[dict], bool], body=None, appear=None) -> dict:
        return poll(
            self.leader,
            self.port,
            path,
            until,
            appear=self.appear if appear is None else appear,
            lost_after=self.lost_after,
            body=body,
        )

    def join(self, keys: dict) -> dict:
        """This host's public keys (empty where the launcher needs no SSH), once accepted."""
        return self._ask(JOIN, lambda _: True, body=keys)

    def peers(self, until: Callable[[dict], bool]) -> dict:
        """The job's members ({"complete", "hosts", "state", "exit_code"}), until until(it)."""
        return self._ask(PEERS + self._as_me, until)

    def status(self, until: Callable[[dict], bool]) -> dict:
        """The job's state ({"state", "exit_code", "stacks", "attempt"}), until until(it)."""
        return self._ask(STATUS + self._as_me, until)

    def report(self, result: dict) -> dict:
        """This host's own result; the leader is up already, so silence counts from the start."""
        return self._ask(REPORT, lambda _: True, body=result, appear=self.lost_after)

    def stacks(self, answer: dict) -> dict:
        """This host's ranks' stacks, the answer to the leader's ask."""
        return self._ask(STACKS, lambda _: True, body=answer, appear=self.lost_after)

    def ready(self, attempt: int) -> dict:
        """Nothing is left of the failed attempt's processes on this host."""
        body = {"host": self.me, "attempt": attempt}
        return self._ask(READY, lambda _: True, body=body, appear=self.lost_after)
