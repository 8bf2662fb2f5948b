"""The interleaving behind the Gloo aborts in hvd.init() (docker/patches/
horovod-0.28.1-rendezvous-scope-clear.patch), played against horovodrun's own rendezvous server:
on one host with 2 slots, rank 1 finishes local_localhost and then its one-rank cross_1 scope
before rank 0 finishes local_localhost. Every scope must end cleared: a key left behind is an
old address the next hvd.init() reads. Prints the scopes left, as JSON."""

import json
import urllib.request

from horovod.runner.common.util.hosts import get_host_assignments, parse_hosts
from horovod.runner.http.http_server import RendezvousServer

server = RendezvousServer()
port = server.start()
server.init(get_host_assignments(parse_hosts("localhost:2"), 2))


def send(method: str, path: str) -> None:
    data = b"address" if method == "PUT" else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}/{path}", data=data, method=method)
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200, (method, path, resp.status)


for path in (
    "global/0",
    "global/1",
    "local_localhost/0",
    "local_localhost/1",
    "cross_0/0",
    "cross_1/0",
):
    send("PUT", path)
for path in (
    "global/0",
    "global/1",
    "local_localhost/1",
    "cross_1/0",
    "local_localhost/0",
    "cross_0/0",
):
    send("DELETE", path)
left = {scope: sorted(keys) for scope, keys in server._httpd.cache.items() if keys}
print(json.dumps(left))
server.stop()
