# Sourced by the build-*.sh scripts that compile a release tarball pinned by sha256.
# The caller sets: name (for messages and NOT-BUILT), mode (auto|on|off), out (its output dir).
#   skip REASON            on: fail; auto/off: write $out/NOT-BUILT with the reason, exit 0
#   verified_source URL SHA256 LOCAL DEST MAKE_VAR
#                          DEST = the verified tarball: LOCAL (a copy in the build context's
#                          .sources/, for offline builds: `MAKE_VAR=file make build` puts it
#                          there) if it exists, else URL; a checksum mismatch fails the build in
#                          every mode, an unreachable URL skips.
# shellcheck shell=bash
: "${name:?}" "${mode:?}" "${out:?}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "build-$name: $*" >&2; }
skip() {
    if [ "$mode" = on ]; then say "error: $*"; exit 1; fi
    say "skipped: $*"
    mkdir -p "$out"
    echo "$name not built: $*" >"$out/NOT-BUILT"
    exit 0
}
verified_source() {
    local url=$1 sha=$2 tarball=$3 dest=$4 make_var=$5 rc=0
    local local_copy=()
    if [ -f "$tarball" ]; then
        say "source: $tarball (from the build context)"
        local_copy=(--local "$tarball")
    else
        say "source: $url"
    fi
    python3 "$here/fetch_verified.py" "${local_copy[@]}" "$url" "$sha" "$dest" || rc=$?
    case $rc in
        0) ;;
        75) skip "could not download $url (offline? give the tarball: $make_var=... make build)" ;;
        *) say "error: no verified $name source (see above)"; exit 1 ;;
    esac
}
