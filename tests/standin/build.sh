#!/usr/bin/env bash
# Build the nvidia/cuda stand-ins (tests/standin/Dockerfile) from the local OS base:
#   pytorch-horovod-standin:devel and :base. Then `make build-gpu-standin` builds the gpu
# flavor on them with the unchanged Dockerfile. CUDA_VERSION follows the Dockerfile's pin.
set -euo pipefail
cd "$(dirname "$0")/../.."
SAY_AS=standin
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
docker_init build
LOCAL_BASE=${LOCAL_BASE:-pytorch-horovod-base:bookworm}
STANDIN=${STANDIN:-pytorch-horovod-standin}
cuda=$(pin CUDA_VERSION)
scripts/local-base.sh --if-missing "$LOCAL_BASE"
args=(--build-arg "BASE_IMAGE=$LOCAL_BASE" --build-arg "CUDA_VERSION=$cuda"
      --build-arg "CUDA_WHEELS=cuda-toolkit[nvcc,cccl,cudart,crt,nvvm]==$cuda")
ca=$(scripts/docker.sh ca)
[ -n "$ca" ] && args+=(--secret "id=ca,src=$ca")
start=$SECONDS
for target in base devel; do
    say "building $STANDIN:$target (CUDA $cuda wheels on $LOCAL_BASE)"
    dk_build --progress=plain "${args[@]}" --target "$target" \
        -t "$STANDIN:$target" tests/standin
done
say "built $STANDIN:base and :devel in $((SECONDS - start)) s"
