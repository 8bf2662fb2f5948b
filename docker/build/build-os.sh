#!/usr/bin/env bash
# The builders' OS packages: compilers, Open MPI's headers, Python's. Run by the Dockerfile's
# build-os (on the flavor's builder base) and wheels-os (on the plain OS base), so both get the
# same list.
set -euo pipefail
# The nvidia/cuda images carry a CUDA apt source; it is not needed and may be unreachable.
rm -f /etc/apt/sources.list.d/cuda*.list
apt-get update
apt-get install -y --no-install-recommends \
    build-essential \
    ca-certificates \
    libopenmpi-dev \
    openmpi-bin \
    patch \
    python3-dev \
    python3-venv
rm -rf /var/lib/apt/lists/*
