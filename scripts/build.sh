#!/usr/bin/env bash
# Build the image for FLAVOR (cpu|gpu). Called by `make build`; every input is an environment
# variable the Makefile documents (docs/building.md, "Build arguments").
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
FLAVOR=${FLAVOR:-$(default_flavor)}  # as the Makefile's default: this machine's
IMAGE=${IMAGE:-pytorch-horovod}
TAG=${TAG:-$FLAVOR}
docker_init build
LOCAL_BASE=${LOCAL_BASE:-pytorch-horovod-base:bookworm}

have_image() {
    dk image inspect "$1" >/dev/null 2>&1 && return 0
    say "pulling $1"
    dk pull "$1" >/dev/null 2>&1
}

# The plain OS base: the cpu flavor's builder and runtime, and in both flavors the base the
# runtime's other wheels are built on (stage wheels-os: it must be the gpu runtime's OS release).
plain_base() {
    if [ -n "${BASE_IMAGE:-}" ]; then
        have_image "$BASE_IMAGE" || fail "BASE_IMAGE=$BASE_IMAGE is neither local nor pullable"
        base=$BASE_IMAGE
    elif base=$(pin CPU_BASE_IMAGE) && have_image "$base"; then
        :
    elif [ "$FLAVOR" = gpu ]; then
        fail "$base cannot be pulled: the gpu flavor builds its runtime's wheels on it (the nvidia/cuda images' OS). Load it (docker load) or pass BASE_IMAGE=<an image of the same OS release>"
    else
        say "$base cannot be pulled (no registry?): using the local Debian base $LOCAL_BASE instead"
        if ! dk image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
            say "$LOCAL_BASE does not exist yet: making it (make local-base)"
            scripts/local-base.sh --if-missing "$LOCAL_BASE" || fail "could not make $LOCAL_BASE; run 'make local-base' and see its error, or pass BASE_IMAGE=<an OS image you have>"
        fi
        base=$LOCAL_BASE
    fi
    args+=(--build-arg "CPU_BASE_IMAGE=$base")
}

# The Dockerfile defines the flavors (its block "The flavors"): FLAVOR alone picks the stages'
# bases. Here only which base images this host has, or can pull, is decided.
args=(--build-arg "FLAVOR=$FLAVOR")
case "$FLAVOR" in
    cpu)
        plain_base
        say "cpu flavor on $base"
        ;;
    gpu)
        builder=${BUILDER_IMAGE:-$(pin BUILDER_IMAGE)}
        runtime=${RUNTIME_IMAGE:-$(pin RUNTIME_IMAGE)}
        for b in "$builder" "$runtime"; do
            have_image "$b" || fail "$b cannot be pulled. On a host without registry access, load the nvidia/cuda images (docker load) or pass BUILDER_IMAGE=<CUDA cudnn-devel image> RUNTIME_IMAGE=<matching base image>; or build FLAVOR=cpu"
        done
        plain_base
        args+=(--build-arg "BUILDER_IMAGE=$builder" --build-arg "RUNTIME_IMAGE=$runtime")
        [ -n "${CUDA_ARCHS:-}" ] && args+=(--build-arg "CUDA_ARCHS=$CUDA_ARCHS")
        say "gpu flavor on $builder / $runtime (its runtime's other wheels on $base)"
        ;;
    *) fail "FLAVOR must be cpu or gpu, not '$FLAVOR'" ;;
esac
[ -n "${TORCH_INDEX_URL:-}" ] && args+=(--build-arg "TORCH_INDEX_URL=$TORCH_INDEX_URL")

# The host's CA bundle (a TLS-intercepting proxy) as a BuildKit secret: never in a layer.
ca=$(scripts/docker.sh ca)
if [ -n "$ca" ]; then
    args+=(--secret "id=ca,src=$ca")
    say "passing the CA bundle $ca as a build secret"
fi

# .wheelhouse/ and .sources/ in the build context: what WHEELHOUSE (hard links where possible)
# and the *_TARBALL variables give, or nothing, so nothing stale steers a build silently.
find .wheelhouse .sources -mindepth 1 ! -name README.md -delete
if [ -n "${WHEELHOUSE:-}" ]; then
    [ -d "$WHEELHOUSE" ] || fail "WHEELHOUSE=$WHEELHOUSE is not a directory"
    cp -rl "$WHEELHOUSE"/. .wheelhouse/ 2>/dev/null || cp -r "$WHEELHOUSE"/. .wheelhouse/
    say "wheelhouse: $WHEELHOUSE ($(find .wheelhouse -name '*.whl' | wc -l) wheels), PyPI after it"
fi

# Source tarballs for offline builds (NCCL_TESTS_TARBALL, LIBFABRIC_TARBALL, AWS_OFI_NCCL_TARBALL).
# The build verifies each by sha256; the same check runs here so a wrong file fails now, not after
# the Horovod compile (unless BUILD_ARGS pins another sum).
for pkg in nccl-tests libfabric aws-ofi-nccl; do
    var=$(echo "$pkg" | tr 'a-z-' 'A-Z_')
    given_var=${var}_TARBALL
    given=${!given_var:-}
    [ -n "$given" ] || continue
    [ -f "$given" ] || fail "$given_var=$given is not a file"
    if [[ "${BUILD_ARGS:-}" == *${var}_SHA256=* ]]; then
        cp "$given" ".sources/$pkg.tar.gz"
    else
        python3 docker/build/fetch_verified.py --local "$given" \
            "$(pin "${var}_URL")" "$(pin "${var}_SHA256")" ".sources/$pkg.tar.gz" \
            || fail "$given_var=$given is not $pkg $(pin "${var}_VERSION") (above); for another release pass BUILD_ARGS='--build-arg ${var}_VERSION=... --build-arg ${var}_SHA256=...'"
    fi
    say "$pkg from $given"
done
[ -n "${NCCL_TESTS:-}" ] && args+=(--build-arg "NCCL_TESTS=$NCCL_TESTS")
[ -n "${EFA:-}" ] && args+=(--build-arg "EFA=$EFA")

version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
revision=${VCS_REF:-$(git rev-parse --verify -q HEAD || echo unknown)}
source_url=${SOURCE_URL:-$(git config --get remote.origin.url 2>/dev/null || echo "git+file://$PWD")}
args+=(--build-arg "VERSION=$version" --build-arg "VCS_REF=$revision" --build-arg "SOURCE_URL=$source_url")

# shellcheck disable=SC2206 # BUILD_ARGS is a list of extra docker build flags, split on spaces
extra=(${BUILD_ARGS:-})
say "building $IMAGE:$TAG"
start=$SECONDS
dk_build --progress=plain "${args[@]}" "${extra[@]}" -t "$IMAGE:$TAG" .
size=$(dk image inspect --format '{{.Size}}' "$IMAGE:$TAG")
say "built $IMAGE:$TAG in $((SECONDS - start)) s, $((size / 1000000)) MB"
