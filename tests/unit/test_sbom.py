"""docker/build/write_sbom.py on a fake runtime file system: what it lists, what it leaves out,
and that a missing build argument stops it naming the argument. (The real image's SBOM is checked
against dpkg-query and pip list in tests/container/test_sbom.py.)"""

from __future__ import annotations

import json

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

ENV = {
    "HOROVOD_VERSION": "0.28.1",
    "HOROVOD_SHA256": "a" * 64,
    "SMDEBUG_VERSION": "1.0.34",
    "SMDEBUG_SHA256": "b" * 64,
    "NCCL_TESTS_VERSION": "2.19.6",
    "NCCL_TESTS_URL": "https://example.invalid/nccl-tests.tar.gz",
    "NCCL_TESTS_SHA256": "c" * 64,
    "LIBFABRIC_VERSION": "2.6.0",
    "LIBFABRIC_URL": "https://example.invalid/libfabric.tar.gz",
    "LIBFABRIC_SHA256": "d" * 64,
    "AWS_OFI_NCCL_VERSION": "1.21.1",
    "AWS_OFI_NCCL_URL": "https://example.invalid/aws-ofi-nccl.tar.gz",
    "AWS_OFI_NCCL_SHA256": "e" * 64,
    "BUILDER_IMAGE": "builder:1",
    "RUNTIME_IMAGE": "runtime:1",
    "FLAVOR": "cpu",
}


@pytest.fixture
def rootfs(tmp_path):
    root = tmp_path / "rootfs"
    (root / "var/lib/dpkg").mkdir(parents=True)
    (root / "var/lib/dpkg/status").write_text(STATUS)
    (root / "etc").mkdir()
    (root / "etc/os-release").write_text('ID=debian\nPRETTY_NAME="Debian GNU/Linux 12"\n')
    site = root / "opt/venv/lib/python3.11/site-packages"
    for name, version in (("Foo_Bar", "1.0"), ("horovod", "0.28.1")):
        info = site / f"{name}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        (info / "RECORD").write_text(f"{name}/__init__.py,sha256=x,0\n")
    (root / "opt/nccl-tests").mkdir(parents=True)
    (root / "opt/nccl-tests/NOT-BUILT").write_text("nccl-tests not built: cpu flavor\n")
    patches = tmp_path / "patches"
    patches.mkdir()
    (patches / "horovod-0.28.1-fix.patch").write_text("--- a\n+++ b\n")
    (patches / "other-1.0-x.patch").write_text("--- a\n+++ b\n")
    return root, patches


def render(root, patches, env=ENV) -> dict:
    bom = write_sbom.build(root, root / "opt/venv", patches, dict(env))
    return json.loads(write_sbom.JsonV1Dot6(bom).output_as_string())


def by_origin(doc: dict, kind: str) -> dict[str, dict]:
    return {c["name"]: c for c in doc["components"] if origin(c) == kind}


def test_installed_dpkg_packages_only_with_purls(rootfs):
    doc = render(*rootfs)
    debs = by_origin(doc, "dpkg")
    assert set(debs) == {"libfoo1", "bash"}  # "gone" left config files only
    assert debs["libfoo1"]["purl"] == "pkg:deb/debian/libfoo1@1.2-3?arch=amd64"
    assert {"name": "io.github.pytorch-horovod:dpkg-source", "value": "foo"} in debs["libfoo1"][
        "properties"
    ]


def test_python_distributions_with_the_sha256_of_their_record(rootfs):
    root, _ = rootfs
    doc = render(*rootfs)
    py = by_origin(doc, "python")
    assert set(py) == {"Foo_Bar", "horovod"}
    assert py["Foo_Bar"]["purl"] == "pkg:pypi/foo-bar@1.0"
    record = root / "opt/venv/lib/python3.11/site-packages/Foo_Bar-1.0.dist-info/RECORD"
    assert py["Foo_Bar"]["hashes"][0]["content"] == write_sbom.sha256(record)


def test_sources_with_their_patches_and_what_was_not_built(rootfs):
    doc = render(*rootfs)
    src = by_origin(doc, "source")
    assert set(src) == {"horovod", "smdebug", "nccl-tests", "libfabric", "aws-ofi-nccl"}
    diffs = [p["diff"]["url"] for p in src["horovod"]["pedigree"]["patches"]]
    assert diffs == ["docker/patches/horovod-0.28.1-fix.patch"]  # not other-1.0-x.patch
    assert "pedigree" not in src["smdebug"]
    reasons = [p["value"] for p in src["nccl-tests"]["properties"] if "not-built" in p["name"]]
    assert reasons == ["nccl-tests not built: cpu flavor"]
    assert not [p for p in src["libfabric"]["properties"] if "not-built" in p["name"]]
    ref = src["libfabric"]["externalReferences"][0]
    assert ref["url"] == ENV["LIBFABRIC_URL"] and ref["hashes"][0]["content"] == "d" * 64
    images = [c["name"] for c in doc["components"] if c["type"] == "container"]
    assert sorted(images) == ["builder:1", "runtime:1"]


@pytest.mark.parametrize("missing", ["HOROVOD_SHA256", "LIBFABRIC_URL", "RUNTIME_IMAGE"])
def test_a_missing_build_argument_is_named(rootfs, missing):
    env = {k: v for k, v in ENV.items() if k != missing}
    with pytest.raises(SystemExit, match=f"build argument {missing} is not set"):
        render(*rootfs, env=env)
