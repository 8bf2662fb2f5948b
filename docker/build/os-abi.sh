#!/usr/bin/env bash
# What the runtime's venv and compiled wheels depend on in this OS: its release, Python's minor
# version (the venv's python is the OS's) and Open MPI's version (mpi4py links libmpi). py-wheels
# records it beside the wheels it builds on the plain OS base, where torch-venv is made too; the
# runtime checks its own against it before installing them:
#   os-abi.sh               print this OS's
#   os-abi.sh --check FILE  exit 1, saying both, when FILE's differs
set -euo pipefail
# shellcheck disable=SC1091
. /etc/os-release
python=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# The upstream version: no epoch, no distribution revision.
ompi=$(dpkg-query -W -f '${Version}' openmpi-bin)
ompi=${ompi#*:}
ompi=${ompi%%-*}
abi="${ID}-${VERSION_ID:-unknown} python${python} openmpi${ompi}"
if [ "${1:-}" = --check ]; then
    built=$(cat "$2")
    if [ "$built" != "$abi" ]; then
        echo "os-abi: the runtime's venv and wheels (stages torch-venv and py-wheels) were made on the plain OS base CPU_BASE_IMAGE ($built), but this runtime is $abi. Pass CPU_BASE_IMAGE=<the runtime base's OS image> (for nvidia/cuda:...-ubuntu24.04, ubuntu:24.04)." >&2
        exit 1
    fi
else
    echo "$abi"
fi
