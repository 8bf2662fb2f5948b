"""The Dockerfile defines its flavors: a plain `docker build --build-arg FLAVOR=cpu .`, without
make or scripts/build.sh, makes the cpu image, file for file the one under test (all its layers
come from the build cache that `make build FLAVOR=cpu` left, so this takes seconds)."""

from __future__ import annotations

import subprocess

from hostkit.docker import Docker, build_client
from tests.container.support import ROOT, base_images


def test_a_plain_docker_build_with_flavor_cpu_is_the_cpu_image(client, image, tmp_path):
    assert image.labels.get("io.github.pytorch-horovod.flavor") == "cpu", image.labels
    bases = base_images(image)
    # One OS image for the cpu stages, the runtime's other wheels included.
    assert bases["builder"] == bases["runtime"] == bases["wheels"], bases
    # Only what this host needs: where no registry answers, the OS base the image was built on;
    # behind a TLS-intercepting proxy, its CA (only used if a layer is not cached).
    args = ["--build-arg", "FLAVOR=cpu", "--build-arg", f"CPU_BASE_IMAGE={bases['builder']}"]
    ca = subprocess.run(
        ["scripts/docker.sh", "ca"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    if ca:
        args += ["--secret", f"id=ca,src={ca}"]
    iid = tmp_path / "iid"
    docker = Docker(build_client())  # a BuildKit client, as make's DOCKER
    result = docker.build(*args, "--iidfile", str(iid), str(ROOT), check=False, timeout=1800)
    assert result.returncode == 0, result.stdout[-4000:]
    built = client.images.get(iid.read_text().strip())
    try:
        assert built.attrs["RootFS"]["Layers"] == image.attrs["RootFS"]["Layers"]
        assert built.labels["io.github.pytorch-horovod.flavor"] == "cpu"
        assert "BYOC_FLAVOR=cpu" in built.attrs["Config"]["Env"]
    finally:
        if built.id != image.id:
            client.images.remove(built.id, noprune=False)
