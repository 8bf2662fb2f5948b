#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (MPI on) into $1/bin, against the NCCL torch loads.
# Source: the release tarball NCCL_TESTS_URL, or for offline builds a copy in the build context's
# .sources/nccl-tests.tar.gz (NCCL_TESTS_TARBALL=... make build puts it there); either way it
# must hash to NCCL_TESTS_SHA256 (fetch_verified.py).
# NCCL_TESTS: on (fail without the source), auto (build when the source can be had; otherwise
# leave a note and no binaries), off. A checksum mismatch fails the build in every mode.
# Input: NCCL_TESTS_VERSION, NCCL_TESTS_URL, NCCL_TESTS_SHA256, CUDA_ARCHS.
set -euo pipefail
out=${1:?usage: build-nccl-tests.sh OUT_DIR}
name=nccl-tests
mode=${NCCL_TESTS:-auto}
version=$NCCL_TESTS_VERSION url=$NCCL_TESTS_URL sha=$NCCL_TESTS_SHA256
# shellcheck source=docker/build/source-lib.sh
. "$(dirname "$0")/source-lib.sh"
mkdir -p "$out/bin"
[ "$mode" = off ] && skip "NCCL_TESTS=off"
[ -x /usr/local/cuda/bin/nvcc ] || skip "no CUDA toolkit in the builder (cpu flavor)"

work=$(mktemp -d)
mkdir "$work/src"
verified_source /sources/nccl-tests.tar.gz "$work/src.tar.gz" NCCL_TESTS_TARBALL
tar -xzf "$work/src.tar.gz" -C "$work/src" --strip-components=1
gencode=""
IFS=, read -ra archs <<<"$CUDA_ARCHS"
for a in "${archs[@]}"; do gencode+=" -gencode=arch=compute_$a,code=sm_$a"; done
nccl_home=$("$here/nccl-home.sh")
start=$SECONDS
make -C "$work/src" -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" NVCC_GENCODE="$gencode"
cp "$work/src"/build/*_perf "$out/bin/"
record
say "built $(find "$out/bin" -name '*_perf' | wc -l) binaries in $((SECONDS - start)) s"
