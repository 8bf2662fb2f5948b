# shellcheck shell=bash disable=SC2034  # CONTAINER and EXTRA are the sourcing script's
# Sourced by the sbatch scripts beside it (they run on the allocation's first node):
#   CONTAINER_IMAGE   pyxis --container-image (a .sqsh from `enroot import`, or
#                     [REGISTRY#]IMAGE[:TAG]): every srun runs in it; empty: the nodes run the
#                     image already (scripts/slurm.sh)
#   CONTAINER_MOUNTS  pyxis --container-mounts (default: the submit directory, where the
#                     checkpoints go; add /fsx and the EFA devices' paths on HyperPod)
#   CHECKPOINT_DIR    shared by every node; a requeued job resumes from it
#                     (default: <submit dir>/checkpoints/<job name>)
#   SRUN_ARGS         more srun options (HyperPod: --auto-resume=1)
# Every task starts through byoc-exec: the image's start-time decisions (CUDA compatibility,
# EFA/NCCL), which pyxis skips by not running the image's ENTRYPOINT.
: "${SLURM_JOB_ID:?run this under sbatch}"
SUBMIT_DIR=${SLURM_SUBMIT_DIR:-$PWD}
CHECKPOINT_DIR=${CHECKPOINT_DIR:-$SUBMIT_DIR/checkpoints/$SLURM_JOB_NAME}
mkdir -p "$CHECKPOINT_DIR/model"
# The examples (and SageMaker-style scripts) read these; a requeued job finds its checkpoint.
export SM_CHECKPOINT_DIR=$CHECKPOINT_DIR SM_MODEL_DIR=$CHECKPOINT_DIR/model
CONTAINER=()
if [ -n "${CONTAINER_IMAGE:-}" ]; then
    CONTAINER=(--container-image="$CONTAINER_IMAGE"
        --container-mounts="${CONTAINER_MOUNTS:-$SUBMIT_DIR:$SUBMIT_DIR}"
        --container-workdir="$SUBMIT_DIR" --no-container-mount-home)
fi
read -r -a EXTRA <<<"${SRUN_ARGS:-}"
echo "slurm job $SLURM_JOB_ID (restart ${SLURM_RESTART_COUNT:-0}) on $SLURM_JOB_NODELIST: checkpoints in $CHECKPOINT_DIR" >&2
