"""docker/build/write_sbom.py on a fake runtime file system: what it lists, what it leaves out,
and that a missing build argument stops it naming the argument. (The real image's SBOM is checked
against dpkg-query and pip list in tests/container/test_sbom.py.)"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NO_LIB = "cyclonedx-python-lib is not installed (make test does)"
write_sbom = pytest.importorskip("write_sbom", reason=NO_LIB)
origin = pytest.importorskip("hostkit.sbom", reason=NO_LIB).origin  # make sbom's

STATUS = """Package: libfoo1
Status: install ok installed
Architecture: amd64
Source: foo
Version: 1.2-3
Description: a library
 with a continuation line

Package: gone
Status: deinstall ok config-files
Architecture: amd64
Version: 0.1

Package: bash
Status: install ok installed
Architecture: amd64
Version: 5.2.15-2+b7
"""

ENV = {"BYOC_BASE_IMAGES": "builder=builder:1 runtime=runtime:1 wheels=os:1", "FLAVOR": "cpu"}


def record(rootfs: Path, name: str, kind: str = "tarball", **fields) -> dict:
    """A source's record as docker/build/source_record.py writes it in the image."""
    url = f"https://example.invalid/{name}.tar.gz"
    doc = {"name": name, "version": "1.0", "url": url, "sha256": "d" * 64, "kind": kind,
           "patches": [], "not_built": None, **fields}  # fmt: skip
    where = rootfs / "opt/byoc/sources"
    where.mkdir(parents=True, exist_ok=True)
    (where / f"{name}.json").write_text(json.dumps(doc))
    return doc


@pytest.fixture
def rootfs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(STATUS)
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('ID=debian\nPRETTY_NAME="Debian GNU/Linux 12"\n')
    site = root / "opt/venv/lib/python3.11/site-packages"
    for name, version in (("Foo_Bar", "1.0"), ("torch", "2.15.0")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,sha256=x,0\n")
    patch = {"file": "horovod-0.28.1-fix.patch", "sha256": "f" * 64}
    record(root, "horovod", "pypi-sdist", version="0.28.1", patches=[patch])
    record(root, "smdebug", "pypi-wheel")
    record(root, "nccl-tests", not_built="nccl-tests not built: cpu flavor")
    record(root, "libfabric")
    return root


def render(root, env=ENV) -> dict:
    bom = write_sbom.build(root, root / "opt/venv", dict(env))
    return json.loads(write_sbom.JsonV1Dot6(bom).output_as_string())


def by_origin(doc: dict, kind: str) -> dict[str, dict]:
    return {c["name"]: c for c in doc["components"] if origin(c) == kind}


def test_installed_dpkg_packages_only_with_purls(rootfs):
    doc = render(rootfs)
    debs = by_origin(doc, "dpkg")
    assert set(debs) == {"libfoo1", "bash"}  # "gone" left config files only
    assert debs["libfoo1"]["purl"] == "pkg:deb/debian/libfoo1@1.2-3?arch=amd64"
    assert {"name": "io.github.pytorch-horovod:dpkg-source", "value": "foo"} in debs["libfoo1"][
        "properties"
    ]


def test_python_distributions_with_the_sha256_of_their_record(rootfs):
    root = rootfs
    doc = render(rootfs)
    py = by_origin(doc, "python")
    assert set(py) == {"Foo_Bar", "torch"}
    assert py["Foo_Bar"]["purl"] == "pkg:pypi/foo-bar@1.0"
    record = root / "opt/venv/lib/python3.11/site-packages/Foo_Bar-1.0.dist-info/RECORD"
    assert py["Foo_Bar"]["hashes"][0]["content"] == write_sbom.sha256(record)


def test_sources_as_recorded_with_their_patches_and_what_was_not_built(rootfs):
    doc = render(rootfs)
    src = by_origin(doc, "source")
    assert set(src) == {"horovod", "smdebug", "nccl-tests", "libfabric"}  # what was recorded
    diffs = [p["diff"]["url"] for p in src["horovod"]["pedigree"]["patches"]]
    assert diffs == ["docker/patches/horovod-0.28.1-fix.patch"]
    patch_props = [p["value"] for p in src["horovod"]["properties"] if p["name"].endswith(":patch")]
    assert patch_props == [f"horovod-0.28.1-fix.patch sha256:{'f' * 64}"]
    assert src["horovod"]["purl"] == "pkg:pypi/horovod@0.28.1?type=sdist"
    assert src["smdebug"]["purl"] == "pkg:pypi/smdebug@1.0?type=wheel"
    assert "pedigree" not in src["smdebug"]
    reasons = [p["value"] for p in src["nccl-tests"]["properties"] if "not-built" in p["name"]]
    assert reasons == ["nccl-tests not built: cpu flavor"]
    assert not [p for p in src["libfabric"]["properties"] if "not-built" in p["name"]]
    ref = src["libfabric"]["externalReferences"][0]
    assert ref["url"] == "https://example.invalid/libfabric.tar.gz"
    assert ref["hashes"][0]["content"] == "d" * 64
    images = [c["name"] for c in doc["components"] if c["type"] == "container"]
    assert sorted(images) == ["builder:1", "os:1", "runtime:1"]
    props = {
        p["name"].rsplit(":", 1)[1]: p["value"] for p in doc["metadata"]["component"]["properties"]
    }
    assert (props["flavor"], props["torch"], props["horovod"]) == ("cpu", "2.15.0", "0.28.1")


@pytest.mark.parametrize(
    ("base_images", "message"),
    [("", "BYOC_BASE_IMAGES=''"), ("builder=a", "not 'builder=IMAGE runtime=IMAGE wheels=IMAGE'"),
     ("builder=a runtime=b", "not 'builder=IMAGE runtime=IMAGE wheels=IMAGE'"),
     ("builder= runtime=b wheels=c", "not 'builder=IMAGE runtime=IMAGE wheels=IMAGE'")],
)  # fmt: skip
def test_the_base_images_must_be_named(rootfs, base_images, message):
    with pytest.raises(SystemExit, match=re.escape(message)):
        render(rootfs, env={**ENV, "BYOC_BASE_IMAGES": base_images})


@pytest.mark.parametrize(
    ("text", "message"),
    [("{", "not JSON"), ("[]", "not a source record"), ('{"name": "x"}', "not a source record")],
)
def test_a_broken_record_stops_it_naming_the_file(rootfs, text, message):
    (rootfs / "opt/byoc/sources/broken.json").write_text(text)
    with pytest.raises(SystemExit, match=f"broken.json: {message}"):
        render(rootfs)


def test_no_records_at_all_stops_it(rootfs):
    for f in (rootfs / "opt/byoc/sources").iterdir():
        f.unlink()
    with pytest.raises(SystemExit, match="no source records under"):
        render(rootfs)
