#!/usr/bin/env bash
# Builds NVIDIA's nccl-tests (MPI on) into $1/bin, against the NCCL torch loads.
# Source: a tarball in the build context's .wheelhouse/ named nccl-tests-${NCCL_TESTS_VERSION}.tar.gz
# (NCCL_TESTS_TARBALL=... make build puts it there), else a shallow git fetch of
# NCCL_TESTS_COMMIT from GitHub, which git verifies object by object. A tarball records its
# commit (GitHub's archives and `git archive` write it; read back as `git get-tar-commit-id`
# does): it must be NCCL_TESTS_COMMIT, and if NCCL_TESTS_SHA256 is set the file must hash to it
# (the recorded commit is a label, the sha256 a proof).
# NCCL_TESTS: on (fail without the source), auto (build when the source can be had; otherwise
# leave a note and no binaries), off. Input: NCCL_TESTS_VERSION, NCCL_TESTS_COMMIT, CUDA_ARCHS.
set -euo pipefail
out=${1:?usage: build-nccl-tests.sh OUT_DIR}
here=$(cd "$(dirname "$0")" && pwd)
mode=${NCCL_TESTS:-auto}
say() { echo "build-nccl-tests: $*" >&2; }
mkdir -p "$out/bin"
skip() {
    if [ "$mode" = on ]; then say "error: $*"; exit 1; fi
    say "skipped: $*"
    echo "nccl-tests not built: $*" >"$out/NOT-BUILT"
    exit 0
}
[ "$mode" = off ] && skip "NCCL_TESTS=off"
[ -x /usr/local/cuda/bin/nvcc ] || skip "no CUDA toolkit in the builder (cpu flavor)"

work=$(mktemp -d)
mkdir "$work/src"
tarball="/wheelhouse/nccl-tests-${NCCL_TESTS_VERSION}.tar.gz"
repo=https://github.com/NVIDIA/nccl-tests
if [ -f "$tarball" ]; then
    say "source: $tarball (from the build context)"
    commit=$(python3 "$here/tar_commit.py" "$tarball") \
        || { say "error: $tarball records no commit (not made by git archive or GitHub)"; exit 1; }
    if [ "$commit" != "$NCCL_TESTS_COMMIT" ]; then
        say "error: $tarball is commit $commit, not NCCL_TESTS_COMMIT=$NCCL_TESTS_COMMIT (v$NCCL_TESTS_VERSION)"
        exit 1
    fi
    sum=$(sha256sum "$tarball" | cut -d' ' -f1)
    if [ -n "${NCCL_TESTS_SHA256:-}" ] && [ "$sum" != "$NCCL_TESTS_SHA256" ]; then
        say "error: sha256 of $tarball is $sum, not NCCL_TESTS_SHA256=$NCCL_TESTS_SHA256"
        exit 1
    fi
    [ -n "${NCCL_TESTS_SHA256:-}" ] || say "note: commit label checked; set NCCL_TESTS_SHA256=$sum to pin this file"
    tar -xzf "$tarball" -C "$work/src" --strip-components=1
else
    say "source: $repo at $NCCL_TESTS_COMMIT"
    if ! command -v git >/dev/null 2>&1; then
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends git >/dev/null; } \
            || skip "git could not be installed to fetch $repo (offline?)"
    fi
    git -C "$work/src" init -q
    git -C "$work/src" fetch -q --depth 1 "$repo" "$NCCL_TESTS_COMMIT" \
        || skip "could not fetch $repo (offline? give the tarball: NCCL_TESTS_TARBALL=... make build)"
    git -C "$work/src" checkout -q FETCH_HEAD
    commit=$(git -C "$work/src" rev-parse HEAD)
    [ "$commit" = "$NCCL_TESTS_COMMIT" ] || { say "error: fetched $commit, not $NCCL_TESTS_COMMIT"; exit 1; }
fi
say "verified: commit $commit (v$NCCL_TESTS_VERSION)"
gencode=""
IFS=, read -ra archs <<<"$CUDA_ARCHS"
for a in "${archs[@]}"; do gencode+=" -gencode=arch=compute_$a,code=sm_$a"; done
nccl_home=$("$here/nccl-home.sh" "$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')")
start=$SECONDS
make -C "$work/src" -j"$(nproc)" MPI=1 MPI_HOME=/usr/lib/x86_64-linux-gnu/openmpi \
    CUDA_HOME=/usr/local/cuda NCCL_HOME="$nccl_home" NVCC_GENCODE="$gencode"
cp "$work/src"/build/*_perf "$out/bin/"
say "built $(find "$out/bin" -name '*_perf' | wc -l) binaries in $((SECONDS - start)) s"
