#!/usr/bin/env bash
# Make an OS base image from the distribution's package mirror, for hosts that cannot pull one
# from a registry: mmdebstrap (minbase) piped into `docker import`.
#   local-base.sh [--if-missing] IMAGE [SUITE]     e.g. pytorch-horovod-base:bookworm bookworm
# --if-missing (the builds' way): keep IMAGE where it exists. Two builds that need it at once
# (make test builds both flavors side by side) make it once: the second waits for the first.
set -euo pipefail
if_missing=
[ "${1:-}" = --if-missing ] && { if_missing=1; shift; }
image=${1:?usage: local-base.sh [--if-missing] IMAGE [SUITE]}
suite=${2:-bookworm}
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
docker_init docker

lock=${TMPDIR:-/tmp}/pytorch-horovod-local-base.lock
exec 9>>"$lock"
flock 9
if [ -n "$if_missing" ] && dk image inspect "$image" >/dev/null 2>&1; then
    exit 0
fi

if ! command -v mmdebstrap >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing mmdebstrap"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
    else
        say "mmdebstrap is missing: install it (apt-get install mmdebstrap) or pull a base image and pass BASE_IMAGE=..."
        exit 1
    fi
fi
tmp=$(mktemp --suffix=.tar)
trap 'rm -f "$tmp"' EXIT
say "bootstrapping Debian $suite (minbase) from the package mirror"
start=$SECONDS
mmdebstrap --variant=minbase --quiet "$suite" "$tmp"
dk import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --message "mmdebstrap --variant=minbase $suite" \
    "$tmp" "$image" >/dev/null
say "made $image in $((SECONDS - start)) s"
