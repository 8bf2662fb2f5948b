"""The SBOM inside the image (made at build time by docker/build/write_sbom.py with CycloneDX's
library) against the image itself: every dpkg package dpkg-query lists and every distribution pip
lists, at their versions, none missing and none invented; the sources with the Dockerfile's
sha256 and the patches we carry; valid CycloneDX 1.6 (`make sbom`'s check)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys

import pytest

from hostkit import dockerfile
from tests.container.support import ROOT, image_output

PATH = "/opt/byoc/sbom.cdx.json"
# hostkit/sbom.py (make sbom): how it tells dpkg, python and source components apart.
origin = pytest.importorskip(
    "hostkit.sbom", reason="cyclonedx-python-lib is not installed (make test does)"
).origin


def normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@pytest.fixture(scope="module")
def bom(client, image) -> dict:
    assert image.labels.get("io.github.pytorch-horovod.sbom") == PATH
    return json.loads(image_output(image, [PATH], entrypoint="cat"))


def test_every_dpkg_package_and_no_other(client, image, bom):
    listed = image_output(
        image, ["dpkg-query", "-W", "-f", "${db:Status-Abbrev} ${Package} ${Version}\\n"]
    )
    installed = {tuple(line.split()[1:3]) for line in listed.splitlines() if line.startswith("ii ")}
    in_sbom = {(c["name"], c["version"]) for c in bom["components"] if origin(c) == "dpkg"}
    assert len(installed) > 50
    assert installed - in_sbom == set(), "missing from the SBOM"
    assert in_sbom - installed == set(), "in the SBOM, not installed"
    some = next(c for c in bom["components"] if origin(c) == "dpkg")
    assert some["purl"].startswith("pkg:deb/")


def test_every_python_distribution_and_no_other(client, image, bom):
    listed = image_output(image, ["pip", "list", "--format", "json"])
    installed = {(normal(d["name"]), d["version"]) for d in json.loads(listed)}
    in_sbom = {
        (normal(c["name"]), c["version"]) for c in bom["components"] if origin(c) == "python"
    }
    assert {"torch", "horovod", "sagemaker-training", "jupyterlab"} <= {n for n, _ in in_sbom}
    assert installed - in_sbom == set(), "missing from the SBOM"
    assert in_sbom - installed == set(), "in the SBOM, not installed"
    for c in bom["components"]:
        if origin(c) == "python":
            assert re.fullmatch(r"[0-9a-f]{64}", c["hashes"][0]["content"]), c["name"]


def test_sources_carry_the_dockerfiles_sha256_and_our_patches(bom):
    sources = {c["name"]: c for c in bom["components"] if origin(c) == "source"}
    assert set(sources) == {"horovod", "smdebug", "nccl-tests", "libfabric", "aws-ofi-nccl"}
    for name, prefix in (
        ("horovod", "HOROVOD"),
        ("smdebug", "SMDEBUG"),
        ("nccl-tests", "NCCL_TESTS"),
        ("libfabric", "LIBFABRIC"),
        ("aws-ofi-nccl", "AWS_OFI_NCCL"),
    ):
        (ref,) = sources[name]["externalReferences"]
        assert ref["hashes"][0]["content"] == dockerfile.arg(f"{prefix}_SHA256")
        assert sources[name]["version"] == dockerfile.arg(f"{prefix}_VERSION")
    patches = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in (ROOT / "docker" / "patches").glob("*.patch")
    }
    listed = {}
    for c in sources.values():
        for prop in c.get("properties", []):
            if prop["name"].endswith(":patch"):
                file, digest = prop["value"].split(" sha256:")
                listed[file] = digest
    assert listed == patches
    diffs = [p["diff"]["url"] for p in sources["horovod"]["pedigree"]["patches"]]
    assert diffs == sorted(f"docker/patches/{n}" for n in patches if n.startswith("horovod-"))
    # The cpu flavor builds no nccl-tests: the SBOM says so rather than leaving it out.
    not_built = [p for p in sources["nccl-tests"].get("properties", []) if "not-built" in p["name"]]
    assert not_built, sources["nccl-tests"]
    # The cpu flavor: one OS image for the builder, the runtime and the runtime's other wheels
    # (the Dockerfile's flavor block).
    images = [c["name"] for c in bom["components"] if c["type"] == "container"]
    assert len(images) == 3 and len(set(images)) == 1, images


def test_make_sbom_copies_and_validates_it(image, tmp_path):
    out = tmp_path / "sbom.json"
    run = subprocess.run(
        [sys.executable, "-m", "hostkit.sbom", "--image", image.tags[0], "--out", str(out)],
        capture_output=True, text=True, timeout=120, check=False, cwd=ROOT,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert "CycloneDX 1.6, valid" in run.stdout
    assert json.loads(out.read_text())["bomFormat"] == "CycloneDX"
    bad = subprocess.run(
        [sys.executable, "-m", "hostkit.sbom", "--image", "no such image"],
        capture_output=True, text=True, timeout=60, check=False, cwd=ROOT,
    )  # fmt: skip
    assert bad.returncode != 0 and "not an image reference" in bad.stderr
