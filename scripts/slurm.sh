#!/usr/bin/env bash
# A real Slurm in containers, to try docs/slurm.md's commands and for tests/container/test_slurm.py:
#   slurm.sh up [N]        build the test layer <image>-slurm (tests/slurm/Dockerfile: Debian's
#                          Slurm and munge on the image), start slurmctld and node0..node{N-1}
#                          (slurmd and sshd; N = $NODES, default 2, at most 8), wait until every
#                          node is idle
#   slurm.sh exec CMD..    run CMD on the controller, the cluster's login node (srun, sbatch,
#                          squeue, scancel), in /workspace
#   slurm.sh kill NODE     SIGKILL a node now, as a host that dies
#   slurm.sh down          remove the containers, their network and the keys
#   slurm.sh ps            list the containers
# Every container runs the image (its ENV, its byoc-init as PID 1); the tasks slurmd starts run
# in that environment, as pyxis runs a command in the image. /workspace ($SLURM_WORKSPACE) is
# shared by all, for job scripts (`up` copies deploy/slurm's to /workspace/slurm) and
# checkpoints. The munge key, the cluster's SSH key and slurm.conf are made at `up` in
# $SLURM_STATE (default ~/.local/state/pytorch-horovod/<project>), never in the image or the
# repository.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PROJECT=${SLURM_PROJECT:-pytorch-horovod-slurm}
STATE=${SLURM_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/pytorch-horovod/$PROJECT}
# A client with BuildKit (the test layer is built with it), as the Makefile picks one.
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
docker_init build-or-docker
IMAGE_REF=${BYOC_IMAGE:-${IMAGE:-pytorch-horovod}:${TAG:-${FLAVOR:-$(default_flavor)}}}
MAX_NODES=8
# CPUs each node offers Slurm (declared, not detected: containers share the host's cores).
CPUS=${SLURM_CPUS_PER_NODE:-4}
WORKSPACE=${SLURM_WORKSPACE:-$STATE/workspace}
LABEL="byoc.slurm=$PROJECT"
CONTROLLER=$PROJECT-slurmctld


[[ $PROJECT =~ ^[a-z0-9][a-z0-9_-]*$ ]] || fail "SLURM_PROJECT='$PROJECT': use lower-case letters, digits, - and _"
[[ $CPUS =~ ^[1-9][0-9]{0,2}$ ]] || fail "SLURM_CPUS_PER_NODE must be a whole number of CPUs, not '$CPUS'"

# The test layer's tag: <image>-slurm (<image>:latest-slurm for an untagged name; for an image
# given by its id, one per project).
layer_ref() {
    local last=${IMAGE_REF##*/}
    if [[ $IMAGE_REF == sha256:* ]]; then echo "pytorch-horovod-slurm-layer:$PROJECT"
    elif [[ $last == *:* ]]; then echo "$IMAGE_REF-slurm"
    else echo "$IMAGE_REF:latest-slurm"; fi
}

write_conf() {
    local nodes=$1
    cat >"$STATE/etc/slurm.conf" <<CONF
# Made by scripts/slurm.sh up: a test cluster in containers, $nodes node(s).
ClusterName=byoc
SlurmctldHost=slurmctld
AuthType=auth/munge
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
# No cgroups in a container: processes tracked by their parentage, tasks not confined.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
# A killed node is DOWN (and its steps end) after SlurmdTimeout; scancel's SIGTERM is followed
# by SIGKILL after KillWait, as on a site's cluster (whose values are usually larger).
SlurmdTimeout=20
SlurmctldTimeout=30
KillWait=10
InactiveLimit=0
MinJobAge=300
JobRequeue=1
SlurmdParameters=config_overrides
NodeName=node[0-$((nodes - 1))] CPUs=$CPUS State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF
    # slurmd 22.05 always loads a cgroup plugin, and cgroup/v2 needs systemd over dbus, which a
    # container lacks; v1's does nothing when no cgroup-based plugin is configured (none here).
    echo "CgroupPlugin=cgroup/v1" >"$STATE/etc/cgroup.conf"
    chmod 644 "$STATE/etc/slurm.conf" "$STATE/etc/cgroup.conf"
}

up() {
    local nodes=${1:-${NODES:-2}} i deadline states
    if ! [[ $nodes =~ ^[1-9]$ ]] || [ "$nodes" -gt $MAX_NODES ]; then
        fail "up needs 1 to $MAX_NODES nodes, not '$nodes'"
    fi
    [ -z "$(dk ps -aq --filter "label=$LABEL")" ] || fail "cluster '$PROJECT' is already up: scripts/slurm.sh down first"
    dk image inspect "$IMAGE_REF" >/dev/null 2>&1 \
        || fail "image $IMAGE_REF not found: '$(build_command "$IMAGE_REF")' builds it (make slurm-up builds it when missing)"
    mkdir -p "$STATE" "$WORKSPACE"
    chmod 700 "$STATE"
    rm -rf "${STATE:?}/etc"
    mkdir -m 755 "$STATE/etc" "$STATE/etc/key"
    head -c 1024 /dev/urandom >"$STATE/etc/munge.key"
    chmod 600 "$STATE/etc/munge.key"
    ssh-keygen -q -t ed25519 -N "" -C "pytorch-horovod slurm $PROJECT" -f "$STATE/etc/key/id_ed25519" \
        || fail "ssh-keygen failed (is openssh-client installed?)"
    write_conf "$nodes"
    # The shipped sbatch scripts, where every node sees them.
    mkdir -p "$WORKSPACE/slurm"
    cp -f "$ROOT"/deploy/slurm/*.sbatch "$ROOT/deploy/slurm/common.sh" "$WORKSPACE/slurm/"
    local layer start=$SECONDS
    layer=$(layer_ref)
    say "building the test layer $layer (Slurm and munge on $IMAGE_REF)"
    dk_build -q --build-arg "IMAGE=$IMAGE_REF" -t "$layer" "$ROOT/tests/slurm" >/dev/null \
        || fail "building $layer failed"
    dk network create --label "$LABEL" "$PROJECT" >/dev/null
    local common=(--detach --network "$PROJECT" --label "$LABEL" --shm-size "${SLURM_SHM_SIZE:-1g}"
        -v "$STATE/etc:/etc/byoc-slurm:ro" -v "$WORKSPACE:/workspace" -w /workspace)
    dk run "${common[@]}" --name "$CONTROLLER" --hostname slurmctld --network-alias slurmctld \
        "$layer" slurm-node controller >/dev/null
    for ((i = 0; i < nodes; i++)); do
        dk run "${common[@]}" --name "$PROJECT-node$i" --hostname "node$i" --network-alias "node$i" \
            -e SSH_AUTHORIZED_KEYS_FILE=/etc/byoc-slurm/key/id_ed25519.pub \
            -e BYOC_SSH_PEERS='node*' -e BYOC_SSH_PEER_KEY_FILE=/etc/byoc-slurm/key/id_ed25519 \
            -e BYOC_JUPYTER=0 "$layer" slurm-node node >/dev/null
    done
    # Up when slurmctld answers and every node has registered idle.
    deadline=$((SECONDS + ${SLURM_UP_TIMEOUT:-180}))
    while :; do
        states=$(dk exec "$CONTROLLER" sinfo -h -N -o '%t' 2>/dev/null | sort | uniq -c | xargs || true)
        [ "$states" = "$nodes idle" ] && break
        if [ $SECONDS -ge $deadline ]; then
            for ((i = -1; i < nodes; i++)); do
                local c=$PROJECT-node$i
                [ $i -ge 0 ] || c=$CONTROLLER
                echo "--- $c" >&2
                dk logs --tail 15 "$c" >&2 2>&1 || true
            done
            fail "the nodes were not idle within ${SLURM_UP_TIMEOUT:-180} s (sinfo: ${states:-no answer})"
        fi
        sleep 1
    done
    say "$(dk exec "$CONTROLLER" sinfo --version): slurmctld and $nodes node(s) idle in $((SECONDS - start)) s"
    cat >&2 <<EOF
slurm: from the login node (scripts/slurm.sh exec ...), for example:
  scripts/slurm.sh exec srun -N$nodes --ntasks-per-node=2 --mpi=pmix python /opt/byoc/examples/train_synthetic.py --epochs 1
  scripts/slurm.sh exec sbatch slurm/horovod.sbatch      (deploy/slurm, copied to /workspace/slurm; docs/slurm.md)
EOF
}

down() {
    local ids
    ids=$(dk ps -aq --filter "label=$LABEL")
    # shellcheck disable=SC2086  # container ids, one word each
    [ -z "$ids" ] || dk rm -f $ids >/dev/null
    dk network ls -q --filter "label=$LABEL" | xargs -r "${DOCKER_CMD[@]}" network rm >/dev/null
    rm -rf "${STATE:?}/etc"
    say "cluster '$PROJECT' removed (workspace kept: $WORKSPACE)"
}

kill_node() {
    local name=${1:-}
    if ! [[ $name =~ ^node[0-9]$ ]] || [ "${name#node}" -ge $MAX_NODES ]; then
        fail "kill needs a node name, node0..node$((MAX_NODES - 1)), not '$name'"
    fi
    [ -n "$(dk ps -q --filter "label=$LABEL" --filter "name=^$PROJECT-$name\$")" ] || fail "$name is not running in cluster '$PROJECT'"
    say "killing $name (SIGKILL)"
    dk kill -s KILL "$PROJECT-$name" >/dev/null
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    kill) shift; kill_node "$@" ;;
    ps) dk ps -a --filter "label=$LABEL" ;;
    exec) shift; [ $# -gt 0 ] || fail "exec needs a command"; dk exec -i "$CONTROLLER" "$@" ;;
    *) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
