"""The leader's small HTTP service that workers poll: the job key and the job's state.

GET /pubkey            the job's public SSH key (when the leader made it)
GET /status?host=NAME  {"state": "starting"|"running"|"done", "exit_code": N|null}; the leader
                       remembers which workers have seen "done", so it can leave as soon as
                       every worker knows the result.
Only the job's hosts reach it: SageMaker isolates a job's network; locally, the job's network.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class JobState:
    def __init__(self, public_key: str | None):
        self.public_key = public_key
        self.state = "starting"
        self.exit_code: int | None = None
        self.seen_done: set[str] = set()
        self.lock = threading.Lock()

    def set(self, state: str, exit_code: int | None = None) -> None:
        with self.lock:
            self.state, self.exit_code = state, exit_code

    def snapshot(self, host: str | None) -> dict:
        with self.lock:
            if host and self.state == "done":
                self.seen_done.add(host)
            return {"state": self.state, "exit_code": self.exit_code}

    def wait_seen(self, hosts: list[str], timeout: float) -> set[str]:
        """Wait until every host has seen "done"; the hosts that have not, after timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                missing = set(hosts) - self.seen_done
            if not missing:
                return set()
            time.sleep(0.1)
        with self.lock:
            return set(hosts) - self.seen_done


def serve(state: JobState, port: int) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            url = urllib.parse.urlparse(self.path)
            if url.path == "/pubkey" and state.public_key:
                body, ctype = state.public_key.encode() + b"\n", "text/plain"
            elif url.path == "/status":
                host = urllib.parse.parse_qs(url.query).get("host", [None])[0]
                body, ctype = json.dumps(state.snapshot(host)).encode(), "application/json"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):  # quiet: workers poll often
            pass

    server = ThreadingHTTPServer(("0.0.0.0", port), Handler)  # noqa: S104 - peers connect
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True, name="coordinator").start()
    return server


def fetch(host: str, port: int, path: str, timeout: float = 3.0) -> bytes:
    with urllib.request.urlopen(f"http://{host}:{port}{path}", timeout=timeout) as r:  # noqa: S310
        return r.read()


def fetch_status(host: str, port: int, me: str) -> dict:
    return json.loads(fetch(host, port, f"/status?host={urllib.parse.quote(me)}"))


def wait_for_leader(host: str, port: int, path: str, timeout: float) -> bytes:
    """GET path from the leader, retrying until it answers (bounded)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            return fetch(host, port, path)
        except (OSError, urllib.error.URLError) as exc:
            last = exc
            time.sleep(0.5)
    raise TimeoutError(
        f"leader {host} did not answer on port {port} within {timeout:.0f} s ({last})"
    )
