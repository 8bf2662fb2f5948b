#!/usr/bin/env bash
# `make canary TORCH_VERSION=X [TORCHVISION_VERSION=Y]`: does Horovod, with our patches, still
# build and pass its own suites on another torch? Builds the cpu flavor with that torch as
# $IMAGE:canary-torchX, then runs Horovod's suites (hostkit/horovod_suites.py) and the main job's
# smoke (each launcher, as `make smoke`) on it; prints one line for docs/horovod-tests.md's table and
# writes it to build/canary/torch-X.txt.
# TORCHVISION_VERSION unset or empty: no torchvision (Horovod and the smoke job need none). Up to
# 0.29.1 torchvision pinned one torch release exactly; 0.29.2 is built on torch's stable ABI and
# asks for torch>=2.14, so the pinned one can be given to try with the next torch.
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE=${IMAGE:-pytorch-horovod}
FAIL_STATUS=2  # bad input, as the Python tools exit
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
version_re='^[0-9]+\.[0-9]+(\.[0-9]+)?([a-z]+[0-9]+)?(\.(dev|post)[0-9]+)?$'
torch=${TORCH_VERSION:-}
[ -n "$torch" ] || fail "TORCH_VERSION is not set: make canary TORCH_VERSION=2.15.0"
[[ "$torch" =~ $version_re ]] || fail "TORCH_VERSION='$torch' is not a release version such as 2.15.0"
vision=${TORCHVISION_VERSION:-}
[ -z "$vision" ] || [[ "$vision" =~ $version_re ]] \
    || fail "TORCHVISION_VERSION='$vision' is not a release version such as 0.30.0 (or leave it empty)"
tag=canary-torch$torch
out=build/canary
mkdir -p "$out"
result() {  # build suites smoke
    local line
    line="| $torch | ${vision:-none} | $1 | $2 | $3 | $(date -u +%Y-%m-%d) |"
    echo "$line" | tee "$out/torch-$torch.txt"
}

say "building $IMAGE:$tag (cpu flavor, torch $torch, torchvision ${vision:-none})"
if ! FLAVOR=cpu TAG=$tag BUILD_ARGS="${BUILD_ARGS:-} --build-arg TORCH_VERSION=$torch --build-arg TORCHVISION_VERSION=$vision" \
        scripts/build.sh; then
    result "no" "-" "-"
    exit 1
fi
suites=yes
"${PY:-python3}" -m hostkit.horovod_suites --image "$IMAGE:$tag" ${HOROVOD_SRC_TARBALL:+--source "$HOROVOD_SRC_TARBALL"} \
    || suites=no
smoke=yes
for launcher in horovod torchrun; do
    rm -rf "local/canary-$torch-$launcher"
    "${PY:-python3}" -m hostkit.local_train --hosts 2 --slots 2 --launcher "$launcher" --image "$IMAGE:$tag" \
        --hp epochs=1 --hp samples=1024 --timeout 600 --out "local/canary-$torch-$launcher" || smoke=no
done
result "yes" "$suites" "$smoke"
[ "$suites$smoke" = yesyes ]
