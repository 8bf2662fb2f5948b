# Sourced by the build-*.sh scripts that compile a release tarball pinned by sha256.
# The caller sets: name (for messages, NOT-BUILT and the record), mode (auto|on|off), out (its
# output dir), version, url and sha (the pin).
#   skip REASON            on: fail; auto/off: write $out/NOT-BUILT and the source's record with
#                          the reason, exit 0
#   verified_source LOCAL DEST MAKE_VAR
#                          DEST = the verified tarball: LOCAL (a copy in the build context's
#                          .sources/, for offline builds: `MAKE_VAR=file make build` puts it
#                          there) if it exists, else $url; a checksum mismatch fails the build in
#                          every mode, an unreachable URL skips.
#   record [--not-built R] the source's record (source_record.py): what this build compiled
# shellcheck shell=bash
: "${name:?}" "${mode:?}" "${out:?}" "${version:?}" "${url:?}" "${sha:?}"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "build-$name: $*" >&2; }
record() {
    python3 "$here/source_record.py" "$name" --kind tarball --version "$version" --url "$url" \
        --sha256 "$sha" "$@"
}
skip() {
    if [ "$mode" = on ]; then say "error: $*"; exit 1; fi
    say "skipped: $*"
    mkdir -p "$out"
    echo "$name not built: $*" >"$out/NOT-BUILT"
    record --not-built "$name not built: $*"
    exit 0
}
verified_source() {
    local tarball=$1 dest=$2 make_var=$3 rc=0
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
