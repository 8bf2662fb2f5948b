"""`make sbom`: the SBOM of a built image, as the build wrote it into the image
(/opt/byoc/sbom.cdx.json, named by the image's io.github.pytorch-horovod.sbom label), copied out,
checked against CycloneDX's 1.6 JSON schema (CycloneDX's library), and summed up.

    python scripts/sbom.py --image pytorch-horovod:cpu [--out build/sbom/IMAGE_TAG.cdx.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

LABEL = "io.github.pytorch-horovod.sbom"


def fail(message: str) -> int:
    print(f"sbom: error: {message}", file=sys.stderr)
    return 1


def origin(component: dict) -> str:
    """dpkg, python, source (docker/build/write_sbom.py's origin property), else the type."""
    for prop in component.get("properties", []):
        if prop["name"].endswith(":origin"):
            return prop["value"]
    return component["type"]


def docker(docker_bin: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([docker_bin, *args], capture_output=True, text=True, check=False)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True, help="a built image, e.g. pytorch-horovod:cpu")
    p.add_argument("--out", type=Path, help="default: build/sbom/<image>_<tag>.cdx.json")
    p.add_argument("--docker", default="docker")
    args = p.parse_args(argv)
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,255}", args.image):
        return fail(f"--image {args.image!r} is not an image reference")
    inspect = docker(
        args.docker, "image", "inspect", "--format", "{{json .Config.Labels}}", args.image
    )
    if inspect.returncode != 0:
        return fail(f"no image {args.image}: {inspect.stderr.strip()} (make build first)")
    path = (json.loads(inspect.stdout) or {}).get(LABEL)
    if not path:
        return fail(f"{args.image} has no {LABEL} label: built before the SBOM was (rebuild it)")
    read = docker(args.docker, "run", "--rm", "--entrypoint", "cat", args.image, path)
    if read.returncode != 0:
        return fail(f"{args.image}: cannot read {path}: {read.stderr.strip()}")
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(read.stdout)
    if error is not None:
        return fail(f"{args.image}:{path} is not valid CycloneDX 1.6: {error}")
    out = args.out or Path("build/sbom") / (re.sub(r"[/:@]", "_", args.image) + ".cdx.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(read.stdout)
    bom = json.loads(read.stdout)
    kinds = collections.Counter(
        next(
            (q["value"] for q in c.get("properties", []) if q["name"].endswith(":origin")),
            c["type"],
        )
        for c in bom["components"]
    )
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"sbom: {out}: CycloneDX {bom['specVersion']}, valid; {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
