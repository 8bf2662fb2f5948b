"""Record what a build script made from a pinned source, for the SBOM (write_sbom.py) and for
`doctor`: one JSON file per source in /opt/byoc/sources/, which the runtime carries.

usage: source_record.py NAME --version V --url URL --sha256 HEX --kind pypi-sdist|pypi-wheel|tarball
                        [--patch FILE]... [--not-built REASON] [--dir DIR]
(--dir defaults to $SOURCE_RECORDS_DIR, else /opt/byoc/sources.)

The build scripts call it with the values they verified and the patches they applied, so the
record is what this build did, whatever build arguments it was given: the sbom stage needs no
list of the sources or their pins.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from pathlib import Path

from fetch_verified import sha256  # beside this file

IMAGE_DIR = "/opt/byoc/sources"
# SOURCE_RECORDS_DIR: for the build scripts' tests, run outside an image.
DIR = Path(os.environ.get("SOURCE_RECORDS_DIR") or IMAGE_DIR)
KINDS = ("pypi-sdist", "pypi-wheel", "tarball")
# A record's fields, each always present (write_sbom.py reads records of exactly these).
FIELDS = ("name", "version", "url", "sha256", "kind", "patches", "not_built")


def record(args: argparse.Namespace) -> dict:
    if not re.fullmatch(r"[a-z0-9][a-z0-9.-]*", args.name):
        raise SystemExit(f"source_record: name {args.name!r}: lower-case letters, digits, . and -")
    if not re.fullmatch(r"[0-9a-f]{64}", args.sha256):
        raise SystemExit(f"source_record: --sha256 for {args.name} is not 64 hex digits")
    for value, flag in ((args.version, "--version"), (args.url, "--url")):
        if not value:
            raise SystemExit(f"source_record: {flag} for {args.name} is empty")
    patches = []
    for p in args.patch:
        if not p.is_file():
            raise SystemExit(f"source_record: --patch {p} is not a file")
        patches.append({"file": p.name, "sha256": sha256(p)})
    return {
        "name": args.name,
        "version": args.version,
        "url": args.url,
        "sha256": args.sha256,
        "kind": args.kind,
        "patches": patches,
        "not_built": args.not_built or None,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name")
    p.add_argument("--version", required=True)
    p.add_argument("--url", required=True)
    p.add_argument("--sha256", required=True)
    p.add_argument("--kind", required=True, choices=KINDS)
    p.add_argument("--patch", type=Path, action="append", default=[], help="a patch applied")
    p.add_argument("--not-built", help="why the build left it out")
    p.add_argument("--dir", type=Path, default=DIR)
    args = p.parse_args(argv)
    doc = record(args)
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / f"{args.name}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
