#!/usr/bin/env bash
# Make the source tarball the Dockerfile pins for PKG (nccl-tests, libfabric, aws-ofi-nccl, and
# horovod: the tag's tree with test/, for make test-horovod) from a local git clone of that
# project, for hosts that reach no GitHub:
#   scripts/git-archive.sh PKG GIT_DIR OUT.tar.gz
# GitHub's /archive/refs/tags/vX.tar.gz is `git archive --prefix=<name>-X/ vX | gzip -n`, so the
# result must hash to the Dockerfile's pin (<VAR>_SHA256); it is checked here and again where used.
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: scripts/git-archive.sh nccl-tests|libfabric|aws-ofi-nccl|horovod GIT_DIR OUT.tar.gz"
pkg=${1:?$usage}; git_dir=${2:?$usage}; out=${3:?$usage}
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
case "$pkg" in
    nccl-tests|libfabric|aws-ofi-nccl)
        var=$(echo "$pkg" | tr 'a-z-' 'A-Z_'); version=$(pin "${var}_VERSION") ;;
    # Its *_SHA256 is the PyPI sdist's; the tag archive has pins of its own.
    horovod) var=HOROVOD_SRC; version=$(pin HOROVOD_VERSION) ;;
    *) fail "unknown PKG '$pkg'; $usage" ;;
esac
git --git-dir="$git_dir" rev-parse -q --verify "refs/tags/v$version" >/dev/null \
    || fail "$git_dir has no tag v$version (is it a clone of $pkg?)"
part=$(mktemp "${out}.XXXXXX")
trap 'rm -f "$part"' EXIT
git --git-dir="$git_dir" archive --format=tar --prefix="$pkg-$version/" "v$version" | gzip -cn >"$part"
python3 docker/build/fetch_verified.py --local "$part" "$(pin "${var}_URL")" "$(pin "${var}_SHA256")" "$out" \
    || fail "git archive of $pkg v$version does not match the Dockerfile's ${var}_SHA256"
echo "git-archive: $out ($pkg $version, sha256 verified)" >&2
