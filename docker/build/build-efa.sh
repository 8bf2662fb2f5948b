#!/usr/bin/env bash
# Builds one half of the EFA path for NCCL from a release tarball pinned by sha256:
#   build-efa.sh libfabric    /opt/amazon/efa       libfabric with only the efa and shm providers
#   build-efa.sh aws-ofi-nccl /opt/amazon/ofi-nccl  the NCCL net plugin, against that libfabric
# (the EFA installer's paths, so what users know from DLC holds here).
# Sources: LIBFABRIC_URL / AWS_OFI_NCCL_URL, or for offline builds the build context's
# .sources/libfabric.tar.gz and .sources/aws-ofi-nccl.tar.gz; either must hash to the pin.
# EFA: auto (build when the source can be had and the builder has CUDA), on (fail otherwise), off.
# What is not built leaves OUT/NOT-BUILT with the reason, so the image and `doctor` can say it.
set -euo pipefail
name=${1:?usage: build-efa.sh libfabric|aws-ofi-nccl OUT_DIR}
out=${2:?usage: build-efa.sh libfabric|aws-ofi-nccl OUT_DIR}
mode=${EFA:-auto}
case "$name" in
    libfabric) version=$LIBFABRIC_VERSION url=$LIBFABRIC_URL sha=$LIBFABRIC_SHA256 ;;
    aws-ofi-nccl) version=$AWS_OFI_NCCL_VERSION url=$AWS_OFI_NCCL_URL sha=$AWS_OFI_NCCL_SHA256 ;;
    *) echo "build-efa: error: unknown component '$name' (libfabric or aws-ofi-nccl)" >&2; exit 1 ;;
esac
# shellcheck source=docker/build/source-lib.sh
. "$(dirname "$0")/source-lib.sh"
case "$mode" in auto|on|off) ;; *) say "error: EFA must be auto, on or off, not '$mode'"; exit 1 ;; esac
[ "$mode" = off ] && skip "EFA=off"
# The plugin is a CUDA build; the cpu flavor has no use for either half.
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -f "$cuda/include/cuda.h" ] || skip "no CUDA toolkit in the builder (cpu flavor)"

work=$(mktemp -d)
mkdir "$work/src"
jobs=$(nproc)
start=$SECONDS
case "$name" in
    libfabric)
        verified_source /sources/libfabric.tar.gz "$work/src.tar.gz" LIBFABRIC_TARBALL
        tar -xzf "$work/src.tar.gz" -C "$work/src" --strip-components=1
        cd "$work/src"
        # A tag archive has no configure script; a `make dist` tarball has one.
        [ -x configure ] || ./autogen.sh >/dev/null
        # Only efa (and shm, which efa uses within a host); CUDA memory (FI_HMEM) through dlopen,
        # so the library loads on hosts without a driver.
        ./configure --prefix="$out" --enable-only --enable-efa --enable-shm \
            --with-cuda="$cuda" --enable-cuda-dlopen \
            --disable-static --disable-dependency-tracking >"$work/configure.log" \
            || { tail -n 40 "$work/configure.log" config.log >&2; exit 1; }
        make -j"$jobs" >/dev/null
        make install >/dev/null
        # Headers stay: the plugin builds against them, and so can users.
        rm -rf "$out/share" "$out"/lib/*.la
        "$out/bin/fi_info" -l | grep -q '^efa:' || { say "error: fi_info -l does not list efa"; exit 1; }
        ;;
    aws-ofi-nccl)
        fabric=/opt/amazon/efa
        if [ -f "$fabric/NOT-BUILT" ]; then skip "$(cat "$fabric/NOT-BUILT")"; fi
        verified_source /sources/aws-ofi-nccl.tar.gz "$work/src.tar.gz" AWS_OFI_NCCL_TARBALL
        tar -xzf "$work/src.tar.gz" -C "$work/src" --strip-components=1
        cd "$work/src"
        if [ ! -x configure ]; then
            # A tag archive carries no version file; autogen asks git otherwise.
            [ -f .release_version ] || echo "$version" >.release_version
            ./autogen.sh >/dev/null
        fi
        # AWS's own packaging flags (contrib/debian-template): AWS platform tuning, the tuner inside
        # the plugin, the CUDA runtime the process already has; and only libnccl-net-ofi.so, never
        # a plain libnccl-net.so that NCCL would load on every host, EFA or not (DLC's "NET/OFI
        # Only EFA provider is supported" hang). byoc-init names the plugin where EFA is.
        ./configure --prefix="$out" --with-libfabric="$fabric" --with-cuda="$cuda" \
            --enable-platform-aws --enable-cudart-dynamic --disable-nccl-net-library \
            --disable-tests --with-mpi=no --with-nvcc=no --without-lttng --without-valgrind \
            --disable-werror --disable-dependency-tracking >"$work/configure.log" \
            || { tail -n 40 "$work/configure.log" config.log >&2; exit 1; }
        make -j"$jobs" >/dev/null
        make install >/dev/null
        rm -rf "$out/include" "$out/share" "$out"/lib/*.la
        [ -f "$out/lib/libnccl-net-ofi.so" ] || { say "error: no libnccl-net-ofi.so installed"; exit 1; }
        [ ! -e "$out/lib/libnccl-net.so" ] || { say "error: a plain libnccl-net.so was installed"; exit 1; }
        ;;
esac
record
rm -rf "$work"
say "built $name $version in $((SECONDS - start)) s"
