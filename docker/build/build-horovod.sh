#!/usr/bin/env bash
# Builds the Horovod wheel from the PyPI sdist: verified by sha256, patched for current torch
# (docker/patches/), compiled against the torch in the active venv.
# Input: HOROVOD_VERSION, HOROVOD_SHA256, HOROVOD_GPU_OPERATIONS (auto: NCCL where the builder
# has CUDA's nvcc, the gpu flavor, none elsewhere; NCCL; or empty), CUDA_ARCHS, CUDA_TOOLKIT_WHEELS.
# Output: the wheel in $1, and the source's record (source_record.py).
set -euo pipefail
out=${1:?usage: build-horovod.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
fail() { echo "build-horovod: $*" >&2; exit 1; }

work=$(mktemp -d)
mkdir -p "$out"
pip download --no-deps --no-binary horovod "horovod==${HOROVOD_VERSION}" -d "$work"
sdist="$work/horovod-${HOROVOD_VERSION}.tar.gz"
echo "${HOROVOD_SHA256}  ${sdist}" | sha256sum -c - \
    || fail "sha256 of ${sdist} is not HOROVOD_SHA256: a changed upload or a new version; check and update the pin"
tar -xzf "$sdist" -C "$work"
src="$work/horovod-${HOROVOD_VERSION}"
applied=()
for p in "$here"/patches/horovod-"${HOROVOD_VERSION}"-*.patch; do
    [ -e "$p" ] || continue
    echo "build-horovod: applying $(basename "$p")"
    patch -d "$src" -p1 --forward < "$p"
    applied+=(--patch "$p")
done
python3 "$here/source_record.py" horovod --kind pypi-sdist --version "$HOROVOD_VERSION" \
    --url "https://pypi.org/project/horovod/${HOROVOD_VERSION}/#files" --sha256 "$HOROVOD_SHA256" \
    "${applied[@]}"

export HOROVOD_WITH_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 \
       HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
# The bundled gloo's cmake_minimum_required predates what CMake 4 accepts.
export CMAKE_POLICY_VERSION_MINIMUM=3.5
MAKEFLAGS="-j$(nproc)"
export MAKEFLAGS

torch_cuda=$(python -c 'import torch; print(torch.version.cuda or "")')
site=$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')

if [ "${HOROVOD_GPU_OPERATIONS:-}" = auto ]; then
    HOROVOD_GPU_OPERATIONS=
    [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ] && HOROVOD_GPU_OPERATIONS=NCCL
fi
if [ -n "${HOROVOD_GPU_OPERATIONS:-}" ]; then
    [ -n "$torch_cuda" ] || fail "HOROVOD_GPU_OPERATIONS=${HOROVOD_GPU_OPERATIONS} needs a CUDA build of torch, but torch ${TORCH_VERSION:-} is CPU-only; build FLAVOR=cpu or use torch from PyPI"
    cuda_home=${CUDA_HOME:-/usr/local/cuda}
    [ -x "$cuda_home/bin/nvcc" ] || fail "no nvcc under $cuda_home: the gpu flavor needs an nvidia/cuda *devel* BUILDER_IMAGE"
    export CUDA_HOME=$cuda_home HOROVOD_CUDA_HOME=$cuda_home HOROVOD_GPU_OPERATIONS
    export HOROVOD_BUILD_CUDA_CC_LIST=${CUDA_ARCHS}
    if [ "$HOROVOD_GPU_OPERATIONS" = NCCL ]; then
        # Link the NCCL that torch loads, so one NCCL lives in the process. The wheel ships no
        # unversioned libnccl.so; the nccl-home script lays out a directory CMake can use.
        HOROVOD_NCCL_HOME=$("$here/nccl-home.sh" "$site")
        export HOROVOD_NCCL_HOME HOROVOD_NCCL_LINK=SHARED
    fi
elif [ -n "$torch_cuda" ]; then
    # torch is a CUDA build (PyPI's is): horovod/torch's CMake then wants CUDA headers and cudart
    # even for CPU-only operations. Without a toolkit in the base, take NVIDIA's wheels.
    cuda_home=${CUDA_HOME:-/usr/local/cuda}
    if [ ! -x "$cuda_home/bin/nvcc" ]; then
        echo "build-horovod: torch is CUDA ${torch_cuda}; installing ${CUDA_TOOLKIT_WHEELS} for its headers"
        # shellcheck disable=SC2086 # the value is a list of requirement strings
        pip install --target /opt/cuda-toolkit ${CUDA_TOOLKIT_WHEELS}
        cuda_home=$(dirname "$(dirname "$(find /opt/cuda-toolkit -path '*/bin/nvcc' -type f | head -n 1)")")
        [ -d "$cuda_home/include" ] || fail "the CUDA toolkit wheels did not lay out bin/ and include/ as expected under /opt/cuda-toolkit"
        # nvcc.profile and FindCUDAToolkit look in lib64 and for an unversioned libcudart.so.
        ln -sfn lib "$cuda_home/lib64"
        ln -sf "$(find "$cuda_home/lib" -maxdepth 1 -name "libcudart.so.*" -printf "%f\n" | sort | head -n 1)" "$cuda_home/lib/libcudart.so"
    fi
    export CUDA_HOME=$cuda_home HOROVOD_CUDA_HOME=$cuda_home CUDAToolkit_ROOT=$cuda_home
    export PATH="$cuda_home/bin:$PATH"
fi

echo "build-horovod: torch $(python -c 'import torch; print(torch.__version__)'), GPU operations: ${HOROVOD_GPU_OPERATIONS:-none}"
start=$SECONDS
pip wheel --no-build-isolation --no-deps --wheel-dir "$out" "$src"
echo "build-horovod: built in $((SECONDS - start)) s"
