# PyTorch + Horovod training image, SageMaker "bring your own container" compatible.
#
# One file, two flavors, which the block "The flavors" below defines: `--build-arg FLAVOR=cpu`
# is all a plain `docker build` needs (docs/building.md, "Build arguments"):
#   gpu (default): nvidia/cuda cudnn-devel base for the builder, the matching -base image (CUDA's
#                  runtime library only: torch's wheels bring the rest) for the image, Horovod with
#                  NCCL.
#   cpu:           the same stages on a plain OS base (CPU_BASE_IMAGE: Ubuntu, or the Debian base
#                  `make local-base` makes where no registry can be reached), Horovod with Gloo
#                  and MPI.
# Both runtimes carry g++, Python's headers and ninja: torch.compile and C++ extensions build at
# run time (docs/pytorch.md).
#
# Every version is pinned here and only here, in the ARG block before the first FROM (stages
# redeclare the bare names they use); the Makefile and the tests read them from this file.
# BuildKit is required (cache, secret and bind mounts). No "# syntax=" line: the frontend built
# into Docker 20.10 must parse this file when no frontend image can be pulled.

ARG CUDA_VERSION=13.2.1
ARG BASE_OS=ubuntu24.04
ARG BUILDER_IMAGE=nvidia/cuda:${CUDA_VERSION}-cudnn-devel-${BASE_OS}
ARG RUNTIME_IMAGE=nvidia/cuda:${CUDA_VERSION}-base-${BASE_OS}
ARG CPU_BASE_IMAGE=ubuntu:24.04
# PyTorch: a matching pair (TORCHVISION_VERSION empty: no torchvision). TORCH_INDEX_URL empty:
# PyPI (a CUDA 13 build); e.g. https://download.pytorch.org/whl/cpu for a small CPU-only torch in
# the cpu flavor.
ARG TORCH_VERSION=2.15.0
ARG TORCHVISION_VERSION=0.29.2
ARG TORCH_INDEX_URL=
# Horovod from the PyPI sdist, verified by sha256. GPU operations: NCCL (gpu), empty (cpu).
# CUDA_ARCHS: the SageMaker GPU families CUDA 13 covers (A100 p4d 80, A10G g5 86, L4 g6 89,
# H100/H200 p5 90, Blackwell 100 and 120).
ARG HOROVOD_VERSION=0.28.1
ARG HOROVOD_SHA256=92a43f5a94c43907a56805bad15f19700c62ffc83b7ca483f9e104e229f67ef0
# Horovod's own test suites (make test-horovod) come from the tag's source archive, which has
# test/ (the sdist has not), verified by sha256; the image build does not use it.
ARG HOROVOD_SRC_URL=https://github.com/horovod/horovod/archive/refs/tags/v${HOROVOD_VERSION}.tar.gz
ARG HOROVOD_SRC_SHA256=88fbcd2815083607a5d27962f323eae5752e3eb96511aaac98258f280cac0f8e
# auto: NCCL where the builder has CUDA's nvcc (the gpu flavor), none elsewhere.
ARG HOROVOD_GPU_OPERATIONS=auto
ARG CUDA_ARCHS=80,86,89,90,100,120
# NVIDIA's toolkit wheels give horovod/torch's CMake the headers and cudart it asks for when
# torch is a CUDA build but the base has no toolkit (the cpu flavor with PyPI's torch).
ARG CUDA_TOOLKIT_WHEELS=cuda-toolkit[nvcc,cccl,cudart,crt,nvvm]==13.2.2
ARG SMDEBUG_VERSION=1.0.34
ARG SMDEBUG_SHA256=cf468938aa8e502888060b1508b7c78220074da23cd6c9e663e939057784b3f8
# nccl-tests from its release tarball, verified by sha256. NCCL_TESTS: auto (build it when the
# source can be had), on (fail without it), off.
ARG NCCL_TESTS_VERSION=2.19.6
ARG NCCL_TESTS_URL=https://github.com/NVIDIA/nccl-tests/archive/refs/tags/v${NCCL_TESTS_VERSION}.tar.gz
ARG NCCL_TESTS_SHA256=adbd3d27ba6c00bd7b7cf98cc8811c6ad860427ecd5de59527466b21472c0d93
ARG NCCL_TESTS=auto
# EFA for NCCL (gpu flavor): libfabric with the efa provider and AWS's NCCL net plugin, each from
# its tag's source archive, verified by sha256 (docker/build/build-efa.sh). EFA: auto (build when
# the sources can be had), on (fail without them), off. 1.21.1 is tested by AWS with libfabric 2.6.0.
ARG LIBFABRIC_VERSION=2.6.0
ARG LIBFABRIC_URL=https://github.com/ofiwg/libfabric/archive/refs/tags/v${LIBFABRIC_VERSION}.tar.gz
ARG LIBFABRIC_SHA256=16b3652f5f3ac59264443c768e79be5170efed82579d59db31be9a30649a0e5a
ARG AWS_OFI_NCCL_VERSION=1.21.1
ARG AWS_OFI_NCCL_URL=https://github.com/aws/aws-ofi-nccl/archive/refs/tags/v${AWS_OFI_NCCL_VERSION}.tar.gz
ARG AWS_OFI_NCCL_SHA256=64ed17ba1c948bc54dbc917bcaa2e5b619d28f019e3042546aab8b381b5d804d
ARG EFA=auto
# Labels: scripts/build.sh passes the real ones.
ARG VERSION=dev
ARG VCS_REF=unknown
ARG SOURCE_URL=unknown
ARG FLAVOR=gpu

# ---------------------------------------------------------------------------------------------
# The flavors: each is a builder base and a runtime base, picked by FLAVOR below (BuildKit builds
# only the stages the target needs, so the other flavor's images are never pulled). The builder
# base names both for the SBOM.
FROM ${BUILDER_IMAGE} AS builder-base-gpu
ARG BUILDER_IMAGE
ARG RUNTIME_IMAGE
ARG CPU_BASE_IMAGE
ENV BYOC_BASE_IMAGES="builder=${BUILDER_IMAGE} runtime=${RUNTIME_IMAGE} wheels=${CPU_BASE_IMAGE}"
FROM ${RUNTIME_IMAGE} AS runtime-base-gpu

FROM ${CPU_BASE_IMAGE} AS builder-base-cpu
ARG CPU_BASE_IMAGE
ENV BYOC_BASE_IMAGES="builder=${CPU_BASE_IMAGE} runtime=${CPU_BASE_IMAGE} wheels=${CPU_BASE_IMAGE}"
FROM ${CPU_BASE_IMAGE} AS runtime-base-cpu

# ---------------------------------------------------------------------------------------------
# The runtime's OS packages, on either base (Debian and Ubuntu names agree).
# A stage above, picked by FLAVOR, not a registry image:
# hadolint ignore=DL3006
FROM runtime-base-${FLAVOR} AS runtime-os
SHELL ["/bin/bash", "-o", "pipefail", "-euc"]
ENV DEBIAN_FRONTEND=noninteractive \
    LANG=C.UTF-8 \
    LC_ALL=C.UTF-8
# The nvidia/cuda images carry a CUDA apt source; it is not needed and may be unreachable.
RUN rm -f /etc/apt/sources.list.d/cuda*.list \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
        ca-certificates \
        iproute2 \
        # iperf3: the first check of a slow cluster's link (`make bench` measures it).
        iperf3 \
        libgomp1 \
        openmpi-bin \
        openssh-client \
        openssh-server \
        procps \
        python3 \
        python3-venv \
        # What PyTorch compiles with at run time (docs/pytorch.md, "Compilers in the runtime"):
        # torch.compile's C++ backend and torch.utils.cpp_extension call g++ (which brings gcc,
        # the libc headers and OpenMP's omp.h); inductor's generated code and Triton's launcher
        # (compiled with gcc the first time a GPU kernel runs) include Python.h. ninja, which
        # cpp_extension drives, is a locked wheel (docker/requirements.in).
        g++ \
        python3-dev \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
 # Host keys are made at container start, never baked into a layer.
 && rm -f /etc/ssh/ssh_host_*

# ---------------------------------------------------------------------------------------------
# The builders' OS: compilers, Open MPI's headers, Python's (docker/build/build-os.sh). Two
# builders start from it and run side by side (BuildKit builds independent stages at once):
# Horovod's, which needs torch, and nccl-tests.
# A stage above, picked by FLAVOR, not a registry image:
# hadolint ignore=DL3006
FROM builder-base-${FLAVOR} AS build-os
SHELL ["/bin/bash", "-o", "pipefail", "-euc"]
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8 \
    VENV=/opt/venv PATH=/opt/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
RUN --mount=type=bind,source=docker/build/build-os.sh,target=/tmp/build-os.sh /tmp/build-os.sh
COPY docker/build/pip-env.sh /usr/local/lib/byoc-build/pip-env.sh
COPY docker/requirements-build.txt /tmp/requirements-build.txt

# The same OS and tools on the plain OS base (CPU_BASE_IMAGE) in both flavors: the runtime's
# venv (torch) and other wheels need no CUDA, so they are made here, and a machine that builds
# both flavors (CI, a release) makes them once. In the cpu flavor this is build-os itself (same
# base, same steps: BuildKit solves them once). The gpu flavor's runtime must be the same OS
# release, Python and Open MPI (the venv's python is the OS's; mpi4py links Open MPI):
# runtime-files checks (docker/build/os-abi.sh).
FROM builder-base-cpu AS wheels-os
SHELL ["/bin/bash", "-o", "pipefail", "-euc"]
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8 \
    VENV=/opt/venv PATH=/opt/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_WARN_SCRIPT_LOCATION=1
RUN --mount=type=bind,source=docker/build/build-os.sh,target=/tmp/build-os.sh /tmp/build-os.sh
COPY docker/build/pip-env.sh /usr/local/lib/byoc-build/pip-env.sh

# The runtime's venv with torch (and torchvision): installed once, here. The runtime copies it
# whole, and the builder compiles Horovod against another copy: the very torch the image ships.
# It needs neither CUDA nor the flavor's base, only the runtime's Python: so it is made on the
# plain OS base in both flavors, like py-wheels (the runtime checks it is the same OS release and
# Python: docker/build/os-abi.sh), and a machine that builds both flavors installs torch once.
FROM wheels-os AS torch-venv
ARG TORCH_VERSION
ARG TORCHVISION_VERSION
ARG TORCH_INDEX_URL
# torch first: the biggest layer, and the one that changes least. (Pinned by ARG.) An empty
# TORCHVISION_VERSION leaves torchvision out (the torch canary, before a matching one exists).
# pip's bytecode (__pycache__) stays: ~300 MB that halve every fresh container's
# `import torch, horovod.torch` (7 s -> 3.5 s here), for each rank, each elastic join, and a
# non-root user, who cannot write it at run time.
# hadolint ignore=DL3013
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /usr/local/lib/byoc-build/pip-env.sh \
 && python3 -m venv "${VENV}" \
 && pip install ${TORCH_INDEX_URL:+--index-url "${TORCH_INDEX_URL}"} \
        "torch==${TORCH_VERSION}" ${TORCHVISION_VERSION:+"torchvision==${TORCHVISION_VERSION}"}

# smdebug (last release 2023) patched for protobuf >= 4 and numpy 2 (docs/patches.md),
# and the other sdists the runtime needs (sagemaker-training has a C extension), as wheels;
# the runtime installs them with the rest of the lock. No torch here: none of them builds
# against it, so this runs while torch downloads and Horovod compiles.
FROM wheels-os AS py-wheels
ARG SMDEBUG_VERSION
ARG SMDEBUG_SHA256
COPY docker/build/build-smdebug.sh docker/build/smdebug_pb2_upgrade.py docker/build/source_record.py \
     docker/build/fetch_verified.py docker/build/os-abi.sh /usr/local/lib/byoc-build/
COPY docker/patches/ /usr/local/lib/byoc-build/patches/
COPY docker/requirements.txt docker/requirements-build.txt /tmp/
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /usr/local/lib/byoc-build/pip-env.sh \
 && python3 -m venv "${VENV}" \
 && pip install --require-hashes -r /tmp/requirements-build.txt \
 && /usr/local/lib/byoc-build/build-smdebug.sh /wheels \
 # mpi4py from source, against this image's Open MPI (PyPI's wheels bring an MPI of their own).
 # Every file fetched is checked against the lock's sha256 (make lock); sdists' build
 # dependencies, which pip fetches for their isolated builds, are not (pip does not hash them).
 && pip wheel --require-hashes --no-binary mpi4py --wheel-dir /wheels -r /tmp/requirements.txt \
 # What the wheels were built for, which the runtime checks before it installs them.
 && /usr/local/lib/byoc-build/os-abi.sh > /wheels-abi

# What builds against torch: the runtime's venv (torch-venv: every base's python3 is the
# distribution's, at the same path), and the build's tools beside its torch. pip-env.sh points pip
# at the CA secret and the wheelhouse when the build is given them. Horovod's builder and
# nccl-tests start from here, side by side.
FROM build-os AS build-torch
COPY --from=torch-venv /opt/venv /opt/venv
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /usr/local/lib/byoc-build/pip-env.sh \
 && python3 -c 'import sys, torch; print(f"builder: torch {torch.__version__} on Python {sys.version.split()[0]}")' \
 && pip install --require-hashes -r /tmp/requirements-build.txt

# Horovod from the PyPI sdist, verified, patched, built into a wheel.
FROM build-torch AS builder
ARG HOROVOD_VERSION
ARG HOROVOD_SHA256
ARG HOROVOD_GPU_OPERATIONS
ARG CUDA_ARCHS
ARG CUDA_TOOLKIT_WHEELS
COPY docker/patches/ /usr/local/lib/byoc-build/patches/
COPY docker/build/build-horovod.sh docker/build/nccl-home.sh docker/build/source_record.py \
     docker/build/fetch_verified.py /usr/local/lib/byoc-build/
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /usr/local/lib/byoc-build/pip-env.sh \
 && /usr/local/lib/byoc-build/build-horovod.sh /wheels

# nccl-tests (MPI on) against torch's NCCL, from the release tarball verified by sha256
# (docker/build/build-nccl-tests.sh; offline builds: NCCL_TESTS_TARBALL=... make build).
# NCCL_TESTS=auto builds it when the source can be had; on: fail without it; off: leave it out.
FROM build-torch AS nccl-tests
ARG NCCL_TESTS_VERSION
ARG NCCL_TESTS_URL
ARG NCCL_TESTS_SHA256
ARG NCCL_TESTS
ARG CUDA_ARCHS
COPY docker/build/build-nccl-tests.sh docker/build/source-lib.sh docker/build/nccl-home.sh \
     docker/build/fetch_verified.py docker/build/source_record.py /usr/local/lib/byoc-build/
RUN --mount=type=secret,id=ca \
    --mount=type=bind,source=.sources,target=/sources \
    /usr/local/lib/byoc-build/build-nccl-tests.sh /opt/nccl-tests

# EFA: libfabric (efa + shm providers) and the aws-ofi-nccl plugin, each in a stage of its own,
# off the builder's OS (they need neither torch nor Horovod, so BuildKit runs them alongside).
# The gpu flavor's builder for them: autotools and the verbs headers.
FROM builder-base-gpu AS efa-builder-gpu
SHELL ["/bin/bash", "-o", "pipefail", "-euc"]
ENV DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8
RUN rm -f /etc/apt/sources.list.d/cuda*.list \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
        autoconf \
        automake \
        build-essential \
        ca-certificates \
        libhwloc-dev \
        libibverbs-dev \
        libtool \
        pkg-config \
        python3 \
 && rm -rf /var/lib/apt/lists/*
# The cpu flavor builds neither half (no CUDA: build-efa.sh records why, with python3), so it
# needs no install of its own: the builders' OS, which its build makes anyway.
FROM build-os AS efa-builder-cpu
# A stage above, picked by FLAVOR, not a registry image:
# hadolint ignore=DL3006
FROM efa-builder-${FLAVOR} AS efa-builder
COPY docker/build/build-efa.sh docker/build/source-lib.sh docker/build/fetch_verified.py \
     docker/build/source_record.py /usr/local/lib/byoc-build/

FROM efa-builder AS libfabric
ARG LIBFABRIC_VERSION
ARG LIBFABRIC_URL
ARG LIBFABRIC_SHA256
ARG EFA
RUN --mount=type=secret,id=ca \
    --mount=type=bind,source=.sources,target=/sources \
    /usr/local/lib/byoc-build/build-efa.sh libfabric /opt/amazon/efa

FROM efa-builder AS aws-ofi-nccl
ARG AWS_OFI_NCCL_VERSION
ARG AWS_OFI_NCCL_URL
ARG AWS_OFI_NCCL_SHA256
ARG EFA
COPY --from=libfabric /opt/amazon/efa/ /opt/amazon/efa/
RUN --mount=type=secret,id=ca \
    --mount=type=bind,source=.sources,target=/sources \
    /usr/local/lib/byoc-build/build-efa.sh aws-ofi-nccl /opt/amazon/ofi-nccl

# Our own package, in a stage of its own so an edit rebuilds seconds, not Horovod.
FROM build-torch AS entrypoint-wheel
COPY entrypoint/ /src/entrypoint/
RUN pip wheel --no-deps --no-build-isolation --wheel-dir /wheels-own /src/entrypoint

# ---------------------------------------------------------------------------------------------
FROM runtime-os AS runtime-files
ARG HOROVOD_VERSION
ARG SMDEBUG_VERSION
ENV VENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1 \
    # OpenMPI in a container runs as root unless the user picks another; allow it explicitly.
    OMPI_ALLOW_RUN_AS_ROOT=1 \
    OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    # The NVIDIA container toolkit mounts the driver for these; nothing of the driver is baked.
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    # hwloc's GL plugin looks for X displays :0, :1, ... over TCP (localhost:6000+N): a
    # TensorBoard on 6006 (display :6) accepts and never answers, and every mpirun hangs.
    HWLOC_COMPONENTS=-gl
# torch's venv, made on the plain OS base (stage torch-venv): checked with the wheels below.
COPY --from=torch-venv /opt/venv /opt/venv
# Horovod and the SageMaker libraries, from the wheels the builders made: nothing compiled here,
# no index.
# The lock's pins without its hashes: py-wheels checked what it fetched, and the wheels it
# built from sdists (mpi4py, sagemaker-training, ...) have hashes of their own.
RUN --mount=type=bind,from=builder,source=/wheels,target=/wheels \
    --mount=type=bind,from=py-wheels,source=/wheels,target=/wheels-py \
    --mount=type=bind,from=py-wheels,source=/wheels-abi,target=/tmp/wheels-abi \
    --mount=type=bind,source=docker/build/os-abi.sh,target=/tmp/os-abi.sh \
    --mount=type=bind,source=docker/requirements.txt,target=/tmp/requirements.txt \
    /tmp/os-abi.sh --check /tmp/wheels-abi \
 && sed -nE 's/^([A-Za-z0-9_.-]+==[^ ]+).*/\1/p' /tmp/requirements.txt > /tmp/pins.txt \
 && pip install --no-cache-dir --no-index --find-links /wheels --find-links /wheels-py \
        -r /tmp/pins.txt "horovod==${HOROVOD_VERSION}" "smdebug==${SMDEBUG_VERSION}+byoc.1" \
 && rm /tmp/pins.txt \
 && pip check
# One NCCL in the gpu image: Horovod's RUNPATH and the linker cache (nccl-tests, anything else)
# both lead to the NCCL of torch's nvidia-nccl wheel, ahead of any libnccl2 the base carries.
ARG FLAVOR
RUN --mount=type=bind,source=docker/build/nccl-home.sh,target=/tmp/nccl-home.sh \
    if [ "${FLAVOR}" = gpu ]; then \
        home=$(/tmp/nccl-home.sh) \
     && echo "${home}/lib" > /etc/ld.so.conf.d/000-byoc-nccl.conf \
     && ldconfig; \
    fi
COPY --from=nccl-tests /opt/nccl-tests/ /opt/nccl-tests/
# What each source build made, from what (docker/build/source_record.py): the SBOM reads these.
COPY --from=builder /opt/byoc/sources/ /opt/byoc/sources/
COPY --from=py-wheels /opt/byoc/sources/ /opt/byoc/sources/
COPY --from=nccl-tests /opt/byoc/sources/ /opt/byoc/sources/
ENV PATH=${PATH}:/opt/nccl-tests/bin
# EFA: rdma-core's user-space verbs and efa provider (the kernel driver is the host's), hwloc for
# the plugin, and the linker cache for both. Nothing loads the plugin until byoc-init finds EFA
# devices and sets NCCL_NET_PLUGIN=ofi (entrypoint/byoc/fabric.py).
COPY --from=libfabric /opt/amazon/efa/ /opt/amazon/efa/
COPY --from=aws-ofi-nccl /opt/amazon/ofi-nccl/ /opt/amazon/ofi-nccl/
COPY --from=libfabric /opt/byoc/sources/ /opt/byoc/sources/
COPY --from=aws-ofi-nccl /opt/byoc/sources/ /opt/byoc/sources/
RUN if [ ! -e /opt/amazon/efa/NOT-BUILT ]; then \
        apt-get update \
     && apt-get install -y --no-install-recommends ibverbs-providers libhwloc15 libibverbs1 \
     && rm -rf /var/lib/apt/lists/* /var/cache/apt/archives/*.deb \
     && printf '%s\n' /opt/amazon/efa/lib /opt/amazon/ofi-nccl/lib > /etc/ld.so.conf.d/100-byoc-efa.conf \
     && ldconfig; \
    fi
ENV PATH=${PATH}:/opt/amazon/efa/bin
COPY docker/openmpi-mca-params.conf /etc/openmpi/openmpi-mca-params.conf
COPY docker/examples/ /opt/byoc/examples/
# The getting-started notebook, copied into the notebook root at start where absent
# (byoc.dev.notebook), and JupyterLab's defaults: no "Jupyter news" or update-check prompts.
COPY docker/notebooks/getting-started.ipynb /opt/byoc/notebooks/getting-started.ipynb
COPY docker/jupyter/overrides.json /opt/venv/share/jupyter/lab/settings/overrides.json
# Read by every non-interactive bash: puts byoc-init back when a platform replaces the
# ENTRYPOINT with `bash -c ...` (SageMaker SDK v3); see the file.
COPY docker/bash-env.sh /opt/byoc/bash-env.sh
ENV BASH_ENV=/opt/byoc/bash-env.sh
RUN --mount=type=bind,from=entrypoint-wheel,source=/wheels-own,target=/wheels-own \
    pip install --no-cache-dir --no-index --no-deps /wheels-own/*.whl \
 # /run/sshd: a bare `/usr/sbin/sshd -D` (SageMaker SDK v3's MPI driver) needs it.
 && mkdir -p /opt/ml /workspace /run/sshd \
 # Kubernetes engines run sshd and mpirun in place of the ENTRYPOINT, as root or as uid 1000
 # (deploy/kubernetes): that user (Ubuntu bases name theirs "ubuntu"), and the SSH settings for
 # the keys the engines mount, from byoc.ssh (the one writer). No keys: the engines bring them.
 && if old=$(getent passwd 1000); then userdel -r "${old%%:*}" 2>/dev/null || userdel "${old%%:*}"; fi \
 && useradd -m -u 1000 -U -s /bin/bash mpiuser \
 && env -u HOROVOD_VERSION -u HOROVOD_GPU_OPERATIONS python -c 'from byoc import ssh; ssh.write_engine_config()'

# ---------------------------------------------------------------------------------------------
# The SBOM (CycloneDX JSON) of the runtime's files, written by CycloneDX's library
# (docker/build/write_sbom.py) in a venv of this stage: every dpkg package and Python
# distribution the runtime holds, the sources built from verified tarballs with their patches,
# the base images.
FROM build-os AS sbom
# CycloneDX's library first, in a layer of its own: the runtime's files change with every build,
# these pins seldom.
COPY docker/requirements-sbom.txt /usr/local/lib/byoc-build/
RUN --mount=type=cache,target=/root/.cache/pip \
    --mount=type=secret,id=ca \
    --mount=type=bind,source=.wheelhouse,target=/wheelhouse \
    . /usr/local/lib/byoc-build/pip-env.sh \
 && python3 -m venv /opt/sbom \
 && /opt/sbom/bin/pip install --require-hashes -r /usr/local/lib/byoc-build/requirements-sbom.txt
ARG FLAVOR
COPY docker/build/write_sbom.py docker/build/fetch_verified.py docker/build/source_record.py \
     /usr/local/lib/byoc-build/
RUN --mount=type=bind,from=runtime-files,target=/rootfs \
    /opt/sbom/bin/python /usr/local/lib/byoc-build/write_sbom.py --rootfs /rootfs \
        --out /sbom.cdx.json

# ---------------------------------------------------------------------------------------------
FROM runtime-files AS runtime
# The SBOM: a file of its own, after everything it describes (make sbom copies it out).
COPY --from=sbom /sbom.cdx.json /opt/byoc/sbom.cdx.json
ARG TORCH_VERSION
ARG HOROVOD_VERSION
ARG VERSION
ARG VCS_REF
ARG SOURCE_URL
ARG FLAVOR
ARG CUDA_VERSION
LABEL org.opencontainers.image.title="pytorch-horovod" \
      org.opencontainers.image.description="PyTorch + Horovod for distributed training; SageMaker BYOC compatible" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.source="${SOURCE_URL}" \
      io.github.pytorch-horovod.flavor="${FLAVOR}" \
      io.github.pytorch-horovod.torch="${TORCH_VERSION}" \
      io.github.pytorch-horovod.horovod="${HOROVOD_VERSION}" \
      io.github.pytorch-horovod.cuda="${CUDA_VERSION}" \
      io.github.pytorch-horovod.sbom="/opt/byoc/sbom.cdx.json"
ENV BYOC_FLAVOR=${FLAVOR}
WORKDIR /workspace
# Development mode (CMD dev): JupyterLab, sshd, TensorBoard. Documentation only; publish with -p.
EXPOSE 8888 22 6006
# Our PID 1 forwards signals and reaps zombies (tini may not be the entry point on SageMaker:
# it would take `train` for its program).
ENTRYPOINT ["/opt/venv/bin/byoc-init"]
# No command: development mode (byoc.dev). `train` (SageMaker) or any command runs instead.
CMD ["dev"]
