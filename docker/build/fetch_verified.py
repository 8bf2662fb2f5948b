"""Fetch a source tarball and prove it by sha256 before anything uses it.

usage: fetch_verified.py [--local FILE] URL SHA256 OUT

With --local (an offline build's copy), FILE is checked instead of downloading URL. OUT appears
only once the bytes match SHA256. Exit status: 0 verified; 1 bad input, a checksum mismatch
(never usable, whatever the build mode) or no such file at the URL (HTTP 404); 75 (EX_TEMPFAIL)
the URL could not be reached.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import ssl
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

UNREACHABLE = 75
# The host's CA bundle as a BuildKit secret (a TLS-intercepting proxy), as pip gets it.
CA_SECRET = Path("/run/secrets/ca")
CHUNK = 1 << 16


def say(msg: str) -> None:
    print(f"fetch_verified: {msg}", file=sys.stderr, flush=True)


def download(url: str, part: Path, timeout: float) -> None:
    cafile = str(CA_SECRET) if CA_SECRET.is_file() and CA_SECRET.stat().st_size else None
    context = ssl.create_default_context(cafile=cafile)
    start = time.monotonic()
    resp = urllib.request.urlopen(url, timeout=timeout, context=context)
    with resp, part.open("wb") as f:
        total = int(resp.headers.get("Content-Length") or 0)
        done = next_report = 0
        while chunk := resp.read(CHUNK):
            f.write(chunk)
            done += len(chunk)
            if total and done >= next_report:
                say(f"{done * 100 // total}% of {total} bytes")
                next_report += max(total // 10, CHUNK)
    say(f"downloaded {done} bytes from {url} in {time.monotonic() - start:.1f} s")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def fetch(url: str, expected: str, out: Path, local: Path | None, timeout: float) -> int:
    expected = expected.strip().lower()
    if len(expected) != 64 or any(c not in "0123456789abcdef" for c in expected):
        say(f"error: SHA256 must be 64 hex digits, got {expected!r}")
        return 1
    part = out.with_name(out.name + ".part")
    try:
        if local is not None:
            if not local.is_file():
                say(f"error: {local} is not a file")
                return 1
            shutil.copyfile(local, part)
            source = str(local)
        else:
            try:
                download(url, part, timeout)
            except urllib.error.HTTPError as e:
                # Not found: a wrong pin, not a network problem. Anything else (a proxy's 403,
                # a 5xx) may pass with another network.
                say(f"cannot download {url}: HTTP {e.code} {e.reason}")
                if e.code in (404, 410):
                    say("error: no such file: check the version and URL pins")
                    return 1
                return UNREACHABLE
            except OSError as e:  # URLError, timeouts, resets
                say(f"cannot download {url}: {getattr(e, 'reason', e)}")
                return UNREACHABLE
            source = url
        got = sha256(part)
        if got != expected:
            say(
                f"error: sha256 of {source} is {got}, not the pinned {expected}: a different "
                "file (or a changed upload). Check it, and pin the new sum only if it is trusted."
            )
            return 1
        os.replace(part, out)
        say(f"verified {source}: sha256 {got}")
        return 0
    finally:
        part.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--local", type=Path, help="use this file instead of downloading URL")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per network operation")
    p.add_argument("url")
    p.add_argument("sha256")
    p.add_argument("out", type=Path)
    a = p.parse_args(argv)
    return fetch(a.url, a.sha256, a.out, a.local, a.timeout)


if __name__ == "__main__":
    sys.exit(main())
