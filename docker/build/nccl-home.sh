#!/usr/bin/env bash
# Prints a directory laid out as NCCL_HOME (include/, lib/libnccl.so{,.2}) whose files are the
# NCCL that torch's nvidia-nccl wheel installed under site-packages ($1; default: the active
# python's). Used at build time (to link Horovod and nccl-tests against it) and in the runtime
# image (where the same path then resolves).
set -euo pipefail
site=${1:-$(python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')}
wheel_dir=$(dirname "$(find "$site/nvidia" -name nccl.h -path '*/include/*' | head -n 1)")
[ -f "$wheel_dir/nccl.h" ] || { echo "nccl-home: no nccl.h under $site/nvidia: torch's nvidia-nccl wheel is missing" >&2; exit 1; }
nccl=$(dirname "$wheel_dir")
home=/opt/venv/nccl
mkdir -p "$home/lib"
ln -sfn "$nccl/include" "$home/include"
ln -sf "$nccl/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
ln -sf libnccl.so.2 "$home/lib/libnccl.so"
echo "$home"
