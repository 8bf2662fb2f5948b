"""`make sbom`: the SBOM of a built image, as the build wrote it into the image
(/opt/byoc/sbom.cdx.json, named by the image's io.github.pytorch-horovod.sbom label), copied out,
checked against CycloneDX's 1.6 JSON schema (CycloneDX's library), and summed up.

    python -m hostkit.sbom --image pytorch-horovod:cpu [--out build/sbom/IMAGE_TAG.cdx.json]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

from hostkit import HostError, run
from hostkit.aws import limits
from hostkit.docker import Docker

LABEL = "io.github.pytorch-horovod.sbom"


def origin(component: dict) -> str:
    """dpkg, python, source (docker/build/write_sbom.py's origin property), else the type."""
    for prop in component.get("properties", []):
        if prop["name"].endswith(":origin"):
            return prop["value"]
    return component["type"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", required=True, help="a built image, e.g. pytorch-horovod:cpu")
    p.add_argument("--out", type=Path, help="default: build/sbom/<image>_<tag>.cdx.json")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    problem = limits.image_problem(args.image)
    if problem:
        raise HostError(f"--image {args.image!r} {problem}", 1)
    docker = Docker()  # $DOCKER, as make passes it ('sudo docker' works)
    inspect = docker(
        "image", "inspect", "--format", "{{json .Config.Labels}}", args.image, check=False
    )
    if inspect.returncode != 0:
        raise HostError(f"no image {args.image}: {inspect.stderr.strip()} (make build first)", 1)
    path = (json.loads(inspect.stdout) or {}).get(LABEL)
    if not path:
        raise HostError(
            f"{args.image} has no {LABEL} label: built before the SBOM was (rebuild it)", 1
        )
    read = docker("run", "--rm", "--entrypoint", "cat", args.image, path, check=False)
    if read.returncode != 0:
        raise HostError(f"{args.image}: cannot read {path}: {read.stderr.strip()}", 1)
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(read.stdout)
    if error is not None:
        raise HostError(f"{args.image}:{path} is not valid CycloneDX 1.6: {error}", 1)
    out = args.out or Path("build/sbom") / (re.sub(r"[/:@]", "_", args.image) + ".cdx.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(read.stdout)
    bom = json.loads(read.stdout)
    kinds = collections.Counter(origin(c) for c in bom["components"])
    summary = ", ".join(f"{n} {k}" for k, n in sorted(kinds.items()))
    print(f"sbom: {out}: CycloneDX {bom['specVersion']}, valid; {summary}")
    return 0


if __name__ == "__main__":
    sys.exit(run("sbom", main))
