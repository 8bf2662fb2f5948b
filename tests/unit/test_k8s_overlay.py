"""make k8s-overlay (hostkit/k8s_overlay.py): a shipped overlay with the user's image and storage
class, rendered and validated before it is written; bad input refused naming the option, and a
file it did not write never replaced."""

from __future__ import annotations

import functools
import os
import re
import shlex
import subprocess

import pytest

from hostkit import k8s_overlay, k8s_validate, run
from tests.unit.fakes import tool_env

ROOT = k8s_validate.ROOT
URI = "123456789012.dkr.ecr.us-east-1.amazonaws.com/pytorch-horovod:gpu-torch2.15.0-g3e13a14"
DIGEST = "sha256:" + "a" * 64


CRDS = functools.cache(k8s_validate.load_crds)


@pytest.fixture(autouse=True)
def crds_once(monkeypatch):
    """The pinned CRDs loaded once for the module (0.7 s each time the tool validates)."""
    monkeypatch.setattr(k8s_validate, "load_crds", CRDS)


def overlay(tmp_path, *args: str) -> int:
    """The tool's exit status, its overlays under tmp_path/k8s."""
    return run("k8s-overlay", k8s_overlay.main, [*args, "--out", str(tmp_path / "k8s")])


def render(directory) -> list[dict]:
    return k8s_validate.render(directory)


def without_image_and_class(objects: list[dict]) -> list[str]:
    """The objects with every container's image one string and no claim's storage class."""

    def strip(node):
        if isinstance(node, list):
            return [strip(item) for item in node]
        if not isinstance(node, dict):
            return node
        out = {k: strip(v) for k, v in node.items() if k != "storageClassName"}
        if isinstance(out.get("image"), str):
            out["image"] = "IMAGE"
        return out

    return k8s_validate.canonical(strip(objects))


@pytest.mark.parametrize("name", ["mpijob-gpu", "volcano-torch-elastic-cpu", "trainer-cpu"])
def test_the_overlay_is_the_shipped_one_with_the_image_and_storage_class(tmp_path, capsys, name):
    code = overlay(tmp_path, "--overlay", name, "--image-uri", URI, "--storage-class", "efs-sc")
    assert code == 0, capsys.readouterr().err
    written = tmp_path / "k8s" / name
    objects = render(written)
    assert set(k8s_validate.container_images(objects)) == {URI}
    claims = [o for o in objects if o["kind"] == "PersistentVolumeClaim"]
    assert [c["spec"]["storageClassName"] for c in claims] == ["efs-sc"]
    assert k8s_validate.validate_objects(objects) == []
    shipped = render(k8s_validate.OVERLAYS_DIR / name)
    assert without_image_and_class(objects) == without_image_and_class(shipped)
    out, err = capsys.readouterr()
    assert out == f"kubectl apply -k {written}\n"
    assert f"image {URI}, storage class efs-sc" in err
    assert [p.name for p in (tmp_path / "k8s").iterdir()] == [name]  # no trial directory left


def test_without_a_storage_class_the_claim_keeps_the_clusters_default(tmp_path):
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", URI) == 0
    objects = render(tmp_path / "k8s" / "mpijob-cpu")
    claim = next(o for o in objects if o["kind"] == "PersistentVolumeClaim")
    assert "storageClassName" not in claim["spec"]


@pytest.mark.parametrize(
    "uri, image",
    [
        ("localhost:5000/pytorch-horovod", "localhost:5000/pytorch-horovod:cpu"),  # the tag kept
        (
            f"reg.example.com/ml/pytorch-horovod@{DIGEST}",
            f"reg.example.com/ml/pytorch-horovod@{DIGEST}",
        ),
        ("reg.example.com:443/ph:v3", "reg.example.com:443/ph:v3"),
    ],
)
def test_the_image_as_kustomize_sets_it(tmp_path, uri, image):
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", uri) == 0
    assert set(k8s_validate.container_images(render(tmp_path / "k8s" / "mpijob-cpu"))) == {image}


def test_its_own_overlay_is_replaced_and_any_other_file_kept(tmp_path, capsys):
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", "reg.io/ph:one") == 0
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", "reg.io/ph:two") == 0
    written = tmp_path / "k8s" / "mpijob-cpu"
    assert set(k8s_validate.container_images(render(written))) == {"reg.io/ph:two"}
    mine = written / "kustomization.yaml"
    mine.write_text("resources: []\n")
    capsys.readouterr()
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", "reg.io/ph:three") == 2
    assert "was not written by make k8s-overlay" in capsys.readouterr().err
    assert mine.read_text() == "resources: []\n"
    mine.unlink()
    (written / "Kustomization").write_text("resources: []\n")
    assert overlay(tmp_path, "--overlay", "mpijob-cpu", "--image-uri", "reg.io/ph:three") == 2
    assert "Kustomization: exists (kustomize would read it)" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, message",
    [
        (["--overlay", "mpijob-cpu", "--image-uri", "pytorch-horovod:cpu"], "names no registry"),
        (["--overlay", "mpijob-cpu", "--image-uri", ""], "--image-uri (IMAGE_URI) is empty"),
        (["--overlay", "mpijob-cpu", "--image-uri", "Reg.io/UPPER"], "not an image reference"),
        (["--overlay", "", "--image-uri", URI], "--overlay (OVERLAY) is empty"),
        (["--overlay", "../base/mpijob", "--image-uri", URI], "--overlay ../base/mpijob is not"),
        (
            ["--overlay", "mpijob-cpu", "--image-uri", URI, "--storage-class", "EFS SC"],
            "--storage-class 'EFS SC': not a storage class name",
        ),
    ],
)
def test_bad_input_is_refused_naming_the_option(tmp_path, capsys, args, message):
    assert overlay(tmp_path, *args) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "k8s").exists()  # nothing made


def test_make_passes_the_variables(tmp_path):
    """make k8s-overlay's command line, run with --out here: the same overlay."""
    env = tool_env(tmp_path, tmp_path)
    done = subprocess.run(
        ["make", "-n", "--no-print-directory", "k8s-overlay", "OVERLAY=mpijob-gpu"]
        + [f"IMAGE_URI={URI}", "STORAGE_CLASS=efs-sc"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(x for x in done.stdout.replace("\\\n", " ").splitlines() if "k8s_overlay" in x)
    argv = shlex.split(line)
    assert argv[1:3] == ["-m", "hostkit.k8s_overlay"], line
    assert overlay(tmp_path, *argv[3:]) == 0
    objects = render(tmp_path / "k8s" / "mpijob-gpu")
    assert set(k8s_validate.container_images(objects)) == {URI}


@pytest.mark.skipif(k8s_validate.kustomize_command() is None, reason="no kustomize v5 on PATH")
def test_kustomize_renders_it_the_same(tmp_path):
    assert (
        overlay(tmp_path, "--overlay", "mpijob-gpu", "--image-uri", URI, "--storage-class", "x")
        == 0
    )
    written = tmp_path / "k8s" / "mpijob-gpu"
    theirs = k8s_validate.render_kustomize(written)
    assert k8s_validate.canonical(theirs) == k8s_validate.canonical(render(written))


def test_the_file_docs_kubernetes_md_shows_is_the_one_it_writes(tmp_path):
    page = (ROOT / "docs" / "kubernetes.md").read_text()
    shown = re.search(r"```yaml\n(# Written by make k8s-overlay.*?)```", page, re.S)
    assert shown, "docs/kubernetes.md: no ```yaml block of make k8s-overlay's file"
    uri = re.search(r"newName: (\S+)\n\s*newTag: (\S+)", shown.group(1))
    assert uri, shown.group(1)
    args = ["--overlay", "mpijob-gpu", "--image-uri", f"{uri[1]}:{uri[2]}"]
    assert overlay(tmp_path, *args, "--storage-class", "efs-sc") == 0
    written = tmp_path / "k8s" / "mpijob-gpu" / "kustomization.yaml"
    # Written under tmp_path, the resource is another way up to the same overlay.
    resource = os.path.relpath(k8s_validate.OVERLAYS_DIR / "mpijob-gpu", written.parent)
    expected = written.read_text().replace(
        resource, "../../../deploy/kubernetes/overlays/mpijob-gpu"
    )
    assert shown.group(1) == expected
