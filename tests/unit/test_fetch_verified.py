"""docker/build/fetch_verified.py: nothing reaches the build unless its sha256 is the pinned one."""

from __future__ import annotations

import hashlib
import http.server
import threading

import fetch_verified
import pytest

from tests.helpers import free_port

BODY = b"nccl-tests source\n" * 5000
GOOD = hashlib.sha256(BODY).hexdigest()
BAD = hashlib.sha256(b"something else").hexdigest()


@pytest.fixture
def server():
    """A loopback HTTP server answering /src.tar.gz with BODY (and 404 elsewhere)."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path != "/src.tar.gz":
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(BODY)))
            self.end_headers()
            self.wfile.write(BODY)

        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_download_with_the_pinned_sum_is_written(server, tmp_path, capsys):
    out = tmp_path / "src.tar.gz"
    assert fetch_verified.main([f"{server}/src.tar.gz", GOOD, str(out)]) == 0
    assert out.read_bytes() == BODY
    err = capsys.readouterr().err
    assert "100% of 90000 bytes" in err and f"sha256 {GOOD}" in err
    assert list(tmp_path.iterdir()) == [out]  # no .part left behind


def test_download_with_another_sum_fails_and_writes_nothing(server, tmp_path, capsys):
    out = tmp_path / "src.tar.gz"
    assert fetch_verified.main([f"{server}/src.tar.gz", BAD, str(out)]) == 1
    assert list(tmp_path.iterdir()) == []
    err = capsys.readouterr().err
    assert f"is {GOOD}, not the pinned {BAD}" in err


def test_local_copy_is_checked_instead_of_the_url(tmp_path, capsys):
    local = tmp_path / "given.tar.gz"
    local.write_bytes(BODY)
    out = tmp_path / "out" / "src.tar.gz"
    out.parent.mkdir()
    # The URL is never asked: a closed port would answer "unreachable".
    url = f"http://127.0.0.1:{free_port()}/src.tar.gz"
    assert fetch_verified.main(["--local", str(local), url, GOOD, str(out)]) == 0
    assert out.read_bytes() == BODY
    assert local.read_bytes() == BODY  # the given file is left as it was

    tampered = tmp_path / "tampered.tar.gz"
    tampered.write_bytes(BODY + b"x")
    out.unlink()
    assert fetch_verified.main(["--local", str(tampered), url, GOOD, str(out)]) == 1
    assert not out.exists()
    assert "not the pinned" in capsys.readouterr().err


def test_unreachable_url_is_its_own_exit_status(tmp_path, capsys):
    out = tmp_path / "src.tar.gz"
    url = f"http://127.0.0.1:{free_port()}/src.tar.gz"
    rc = fetch_verified.main(["--timeout", "5", url, GOOD, str(out)])
    assert rc == fetch_verified.UNREACHABLE
    assert not out.exists()
    assert f"cannot download {url}" in capsys.readouterr().err


def test_missing_file_at_the_url_is_a_wrong_pin_not_an_outage(server, tmp_path, capsys):
    out = tmp_path / "src.tar.gz"
    assert fetch_verified.main([f"{server}/missing", GOOD, str(out)]) == 1
    assert "HTTP 404" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("pin", ["", "abc", "z" * 64])
def test_malformed_pin_is_bad_input(tmp_path, pin, capsys):
    local = tmp_path / "given.tar.gz"
    local.write_bytes(BODY)
    out = tmp_path / "src.tar.gz"
    assert fetch_verified.main(["--local", str(local), "http://unused", pin, str(out)]) == 1
    assert "64 hex digits" in capsys.readouterr().err
    assert not out.exists()


def test_missing_local_copy_is_bad_input(tmp_path, capsys):
    out = tmp_path / "src.tar.gz"
    args = ["--local", str(tmp_path / "absent"), "http://unused", GOOD, str(out)]
    assert fetch_verified.main(args) == 1
    assert "is not a file" in capsys.readouterr().err
