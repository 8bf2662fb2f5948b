#!/usr/bin/env bash
# A local cluster of development containers (docker/compose.yaml), for horovodrun across nodes.
#   cluster.sh up [N]      start node0..node{N-1} (N = $NODES, default 2; at most 8)
#   cluster.sh scale N     while a job runs: start nodes up to node{N-1}, stop those above
#                          (stopped, not removed: a node that comes back keeps its host key)
#   cluster.sh kill NODE   SIGKILL a node now, as a host that dies (scale brings it back)
#   cluster.sh down        stop and remove them, their network and the cluster key
#   cluster.sh ps          list the nodes
#   cluster.sh shell       a shell on node0
#   cluster.sh exec CMD..  run CMD on node0, e.g. horovodrun -np 4 -H node0:2,node1:2 python train.py
#   cluster.sh on NODE CMD..  run CMD on NODE (torchrun starts on every node: docs/elastic.md)
# Elastic jobs find the nodes that answer with byoc-discover-hosts (docs/elastic.md).
# The cluster key is made at `up` and kept outside the image and the repository, in
# $CLUSTER_STATE (default ~/.local/state/pytorch-horovod/<project>); see docs/development.md, "Local cluster".
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

PROJECT=${CLUSTER_PROJECT:-pytorch-horovod}
STATE=${CLUSTER_STATE:-${XDG_STATE_HOME:-$HOME/.local/state}/pytorch-horovod/$PROJECT}
# shellcheck source=scripts/lib.sh
. scripts/lib.sh
docker_init docker
# The image `up` starts; later commands keep the one the cluster was started with (cluster.env).
IMAGE_REF=${BYOC_IMAGE:-${IMAGE:-pytorch-horovod}:${TAG:-${FLAVOR:-$(default_flavor)}}}
MAX_NODES=8


[[ $PROJECT =~ ^[a-z0-9][a-z0-9_-]*$ ]] || fail "CLUSTER_PROJECT='$PROJECT': use lower-case letters, digits, - and _"

# `docker compose` (the plugin) or docker-compose (v1, Debian's package); as root on
# Debian/Ubuntu, install the package when neither is there.
COMPOSE=()
find_compose() {
    if dk compose version >/dev/null 2>&1; then
        COMPOSE=("${DOCKER_CMD[@]}" compose)
        return 0
    fi
    local c
    for c in docker /usr/bin/docker; do
        if command -v "$c" >/dev/null 2>&1 && "$c" compose version >/dev/null 2>&1; then
            COMPOSE=("$c" compose)
            return 0
        fi
    done
    if command -v docker-compose >/dev/null 2>&1; then
        COMPOSE=(docker-compose)
        return 0
    fi
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "no docker compose found: installing docker-compose from the distribution"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker-compose >/dev/null \
            || fail "apt-get install docker-compose failed"
        COMPOSE=(docker-compose)
        return 0
    fi
    fail "neither 'docker compose' nor docker-compose is installed: install the Docker Compose plugin (https://docs.docker.com/compose/install/) or your distribution's docker-compose"
}

KEY_DIR=$STATE/key
export CLUSTER_KEY_DIR=$KEY_DIR
WORKSPACE_GIVEN=${CLUSTER_WORKSPACE:+1}
export CLUSTER_WORKSPACE=${CLUSTER_WORKSPACE:-$STATE/workspace}
export BYOC_IMAGE=$IMAGE_REF
# The compose file refuses to run without these; `down` and `ps` need no real values.
export JUPYTER_TOKEN=${JUPYTER_TOKEN:-$(cat "$STATE/jupyter_token" 2>/dev/null || echo unset)}

compose() {
    local files=(-f "$ROOT/docker/compose.yaml")
    [ -f "$STATE/compose.override.yaml" ] && files+=(-f "$STATE/compose.override.yaml")
    "${COMPOSE[@]}" -p "$PROJECT" "${files[@]}" "$@"
}

# The host port node0's container port $1 is published on.
node0_port() { compose port node0 "$1" | sed 's/.*://'; }

running_nodes() {
    dk ps -aq --filter "label=com.docker.compose.project=$PROJECT" | wc -l
}

# The overlay made at `up` (compose.override.yaml in $STATE), per node, for every node the
# cluster can grow to (`scale`), not only those started:
# - NVIDIA's ulimits (memlock unlimited for pinned memory, 64 MB stack) where the engine may raise
#   them: an engine that itself runs under a capped memlock cannot, and would refuse to start.
# - one block of GPUs per node when this host has NVIDIA GPUs, so that local rank 0 of node0 and
#   of node1 are not the same device; the block size is fixed at `up` (GPUs / NODES), so a node
#   added later gets a block of its own or is refused. CLUSTER_GPUS=0 turns that off.
# It also writes $STATE/cluster.env: how many nodes the cluster can grow to, each node's slots
# (CLUSTER_SLOTS, else GPUs per node, else 2), which byoc-discover-hosts reports and the printed
# commands use, and the image the nodes run, which `scale` starts new nodes from.
write_overlay() {
    local nodes=$1 count=0 per=0 i j ids ulimits="" devices entry cpus=${CLUSTER_CPUS_PER_NODE:-0} cores
    local capacity=$MAX_NODES slots=2
    # CLUSTER_CPUS_PER_NODE=k pins node i to cores i*k .. i*k+k-1, so that nodes do not share
    # cores (make bench's scaling figures); 0 (default): every node may use every core.
    if [ "$cpus" != 0 ]; then
        [[ $cpus =~ ^[1-9][0-9]{0,2}$ ]] || fail "CLUSTER_CPUS_PER_NODE must be a whole number of cores, not '$cpus'"
        cores=$(nproc)
        [ $((cpus * nodes)) -le "$cores" ] || fail "CLUSTER_CPUS_PER_NODE=$cpus for $nodes nodes needs $((cpus * nodes)) cores; this host has $cores"
        [ $((cores / cpus)) -lt "$capacity" ] && capacity=$((cores / cpus))
        say "$cpus core(s) per node, not shared"
    fi
    if dk run --rm --ulimit memlock=-1:-1 --entrypoint true "$BYOC_IMAGE" >/dev/null 2>&1; then
        ulimits="ulimits: {memlock: -1, stack: 67108864}"
    else
        say "warning: this engine may not raise memlock (it runs under a capped limit): nodes keep its default; pinned-memory transfers may be slower"
    fi
    if [ "${CLUSTER_GPUS:-auto}" != 0 ]; then
        count=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ' || true)
        if [ "${count:-0}" -eq 0 ] && [ "${CLUSTER_GPUS:-auto}" != auto ]; then
            fail "CLUSTER_GPUS=${CLUSTER_GPUS} but nvidia-smi lists no GPU here"
        fi
        per=$((count / nodes))
        if [ "$count" -gt 0 ] && [ "$per" -ge 1 ]; then
            say "$count GPUs: $per per node"
            slots=$per
            [ $((count / per)) -lt "$capacity" ] && capacity=$((count / per))
        elif [ "$count" -gt 0 ]; then
            say "warning: $count GPUs for $nodes nodes: every node sees all of them (ranks may share a GPU)"
        fi
    fi
    # CLUSTER_SLOTS: processes per node in the printed commands and in discovery's answer.
    if [ -n "${CLUSTER_SLOTS:-}" ]; then
        [[ $CLUSTER_SLOTS =~ ^[1-9][0-9]{0,2}$ ]] || fail "CLUSTER_SLOTS must be a whole number of processes per node, not '$CLUSTER_SLOTS'"
        slots=$CLUSTER_SLOTS
    fi
    {
        echo "# Made by scripts/cluster.sh up for $nodes node(s) on this host, room for $capacity."
        echo "services:"
        for ((i = 0; i < capacity; i++)); do
            devices=""
            if [ "$per" -ge 1 ]; then
                ids=""
                for ((j = i * per; j < (i + 1) * per; j++)); do ids+="${ids:+, }\"$j\""; done
                devices="deploy: {resources: {reservations: {devices: [{driver: nvidia, device_ids: [$ids], capabilities: [gpu]}]}}}"
            elif [ "$count" -gt 0 ]; then
                devices="deploy: {resources: {reservations: {devices: [{driver: nvidia, count: all, capabilities: [gpu]}]}}}"
            fi
            entry=$ulimits
            [ -n "$devices" ] && entry+="${entry:+, }$devices"
            [ "$cpus" != 0 ] && entry+="${entry:+, }cpuset: \"$((i * cpus))-$((i * cpus + cpus - 1))\""
            echo "  node$i: {$entry}"
        done
    } >"$STATE/compose.override.yaml"
    printf 'CLUSTER_CAPACITY=%d\nCLUSTER_SLOTS=%d\nCLUSTER_IMAGE=%s\n' "$capacity" "$slots" "$BYOC_IMAGE" \
        >"$STATE/cluster.env"
}

# What `up` wrote to $STATE/cluster.env, checked: numbers and an image reference, nothing is sourced.
read_cluster_env() {
    local line
    CLUSTER_CAPACITY="" CLUSTER_SLOTS="" CLUSTER_IMAGE=""
    [ -f "$STATE/cluster.env" ] || fail "$STATE/cluster.env is missing: was the cluster made by an older cluster.sh? 'make cluster-down' and up again"
    while IFS= read -r line; do
        case $line in
            CLUSTER_CAPACITY=[1-9]*) CLUSTER_CAPACITY=${line#*=} ;;
            CLUSTER_SLOTS=[1-9]*) CLUSTER_SLOTS=${line#*=} ;;
            CLUSTER_IMAGE=*) CLUSTER_IMAGE=${line#*=} ;;
        esac
    done <"$STATE/cluster.env"
    [[ $CLUSTER_CAPACITY =~ ^[0-9]+$ && $CLUSTER_SLOTS =~ ^[0-9]+$
        && $CLUSTER_IMAGE =~ ^[A-Za-z0-9][A-Za-z0-9._/:@-]*$ ]] \
        || fail "$STATE/cluster.env is damaged or from an older cluster.sh: 'make cluster-down' and up again"
    export CLUSTER_SLOTS
}

check_count() {
    if ! [[ $1 =~ ^[0-9]+$ ]] || [ "$1" -lt 1 ] || [ "$1" -gt $MAX_NODES ]; then
        fail "NODES must be a number from 1 to $MAX_NODES, not '$1'"
    fi
}

up() {
    local nodes=${1:-${NODES:-2}} services=() i start
    check_count "$nodes"
    dk image inspect "$BYOC_IMAGE" >/dev/null 2>&1 \
        || fail "image $BYOC_IMAGE not found: '$(build_command "$BYOC_IMAGE")' builds it (make cluster-up builds it when missing)"
    local existing
    existing=$(running_nodes)
    if [ "$existing" -gt 0 ]; then
        fail "cluster '$PROJECT' is already up ($existing containers): run 'make cluster-down' first, or pick another CLUSTER_PROJECT"
    fi
    mkdir -p "$STATE" "$CLUSTER_WORKSPACE"
    chmod 700 "$STATE"
    # A new key for every cluster: nothing of it is in the image or the repository.
    rm -rf "$KEY_DIR"
    mkdir -m 700 "$KEY_DIR"
    ssh-keygen -q -t ed25519 -N "" -C "pytorch-horovod cluster $PROJECT" -f "$KEY_DIR/id_ed25519" \
        || fail "ssh-keygen failed (is openssh-client installed?)"
    if [ "$JUPYTER_TOKEN" = unset ]; then
        JUPYTER_TOKEN=$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
        (umask 077 && echo "$JUPYTER_TOKEN" >"$STATE/jupyter_token")
    fi
    # The default workspace starts with the image's examples (train.py: Horovod, train_ddp.py:
    # DDP, and the module both import); a given one is untouched.
    if [ -z "$WORKSPACE_GIVEN" ] && [ ! -e "$CLUSTER_WORKSPACE/train.py" ]; then
        cp docker/examples/train_synthetic.py "$CLUSTER_WORKSPACE/train.py"
        cp docker/examples/train_ddp.py docker/examples/train_elastic.py \
            docker/examples/synthetic_task.py "$CLUSTER_WORKSPACE/"
    fi
    write_overlay "$nodes"
    read_cluster_env
    [ "$nodes" -le "$CLUSTER_CAPACITY" ] || fail "this host has room for $CLUSTER_CAPACITY node(s), not $nodes"
    for ((i = 0; i < nodes; i++)); do services+=("node$i"); done
    find_compose
    say "starting ${services[*]} from $BYOC_IMAGE (project $PROJECT)"
    compose up -d --no-build "${services[@]}" || { compose down -v --remove-orphans >/dev/null 2>&1 || true; fail "compose up failed (see above)"; }
    # Ready when node0 logs into every node with the cluster key, as horovodrun will.
    start=$SECONDS
    for i in "${services[@]}"; do
        until compose exec -T node0 ssh "$i" true >/dev/null 2>&1; do
            if [ $((SECONDS - start)) -gt 90 ]; then
                compose logs --tail 30 >&2 || true
                fail "node0 could not ssh to $i within 90 s (logs above); 'make cluster-down' cleans up"
            fi
            sleep 1
        done
    done
    local ssh_port jupyter_port tensorboard_port hosts=""
    for ((i = 0; i < nodes; i++)); do hosts+="${hosts:+,}node$i:$CLUSTER_SLOTS"; done
    ssh_port=$(node0_port 22)
    jupyter_port=$(node0_port 8888)
    tensorboard_port=$(node0_port 6006)
    say "$nodes node(s) up in $((SECONDS - start)) s; /workspace on every node is $CLUSTER_WORKSPACE"
    cat >&2 <<EOF
  shell on node0:  scripts/cluster.sh shell
                   ssh -i $KEY_DIR/id_ed25519 -p $ssh_port root@${CLUSTER_BIND:-127.0.0.1}
  train:           horovodrun -np $((nodes * CLUSTER_SLOTS)) -H $hosts python train.py
  elastic:         horovodrun -np $((nodes * CLUSTER_SLOTS)) --min-np $CLUSTER_SLOTS --max-np $((CLUSTER_CAPACITY * CLUSTER_SLOTS)) \\
                       --host-discovery-script byoc-discover-hosts python train_elastic.py
  add/remove:      make cluster-scale NODES=$((nodes + 1))    (node0 stays; docs/elastic.md)
  JupyterLab:      http://${CLUSTER_BIND:-127.0.0.1}:$jupyter_port/lab?token=$JUPYTER_TOKEN
                   (getting-started.ipynb in /workspace: Horovod and DDP from a notebook)
  TensorBoard:     http://${CLUSTER_BIND:-127.0.0.1}:$tensorboard_port/  (logs in /workspace/runs)
  stop:            make cluster-down
EOF
}

down() {
    find_compose
    say "stopping cluster '$PROJECT'"
    compose down -v --remove-orphans --timeout 15
    rm -rf "$KEY_DIR" "$STATE/compose.override.yaml" "$STATE/cluster.env" "$STATE/jupyter_token"
    [ "$(running_nodes)" -eq 0 ] || fail "containers of '$PROJECT' are still there: $DOCKER ps --filter label=com.docker.compose.project=$PROJECT"
}

# Nodes node0..node{N-1} run, the others are stopped (SIGTERM, then SIGKILL after the grace
# period), kept with their host keys for a later scale. Jobs see hosts come and go through
# byoc-discover-hosts, which lists only the nodes whose sshd answers.
scale() {
    local nodes=${1:-} i name state start add=() stop=()
    check_count "$nodes"
    [ "$(running_nodes)" -gt 0 ] || fail "cluster '$PROJECT' is not up: 'make cluster-up' first"
    read_cluster_env
    # New nodes run the cluster's image, whatever IMAGE/TAG/BYOC_IMAGE say now.
    if [ "$CLUSTER_IMAGE" != "$BYOC_IMAGE" ]; then
        say "cluster '$PROJECT' runs $CLUSTER_IMAGE (from its cluster-up), not $BYOC_IMAGE: new nodes run $CLUSTER_IMAGE ('make cluster-down', then cluster-up, to change it)"
        export BYOC_IMAGE=$CLUSTER_IMAGE
    fi
    [ "$nodes" -le "$CLUSTER_CAPACITY" ] \
        || fail "this cluster has room for $CLUSTER_CAPACITY node(s) (GPUs or cores per node were fixed at up), not $nodes"
    find_compose
    for ((i = 0; i < MAX_NODES; i++)); do
        name=node$i
        state=$(dk inspect -f '{{.State.Running}}' "$(compose ps -q "$name" 2>/dev/null || true)" 2>/dev/null || echo none)
        if [ "$i" -lt "$nodes" ] && [ "$state" != true ]; then
            add+=("$name")
        elif [ "$i" -ge "$nodes" ] && [ "$state" = true ]; then
            stop+=("$name")
        fi
    done
    if [ ${#stop[@]} -gt 0 ]; then
        say "stopping ${stop[*]}"
        compose stop --timeout 15 "${stop[@]}" || fail "compose stop ${stop[*]} failed (see above)"
    fi
    if [ ${#add[@]} -gt 0 ]; then
        say "starting ${add[*]}"
        compose up -d --no-build --no-recreate "${add[@]}" || fail "compose up ${add[*]} failed (see above)"
        start=$SECONDS
        for name in "${add[@]}"; do
            until compose exec -T node0 ssh "$name" true >/dev/null 2>&1; do
                [ $((SECONDS - start)) -le 90 ] || fail "node0 could not ssh to $name within 90 s; 'scripts/cluster.sh ps' shows the nodes"
                sleep 1
            done
        done
        say "${add[*]} answer(s) ssh from node0 after $((SECONDS - start)) s"
    fi
    say "$nodes node(s) running"
}

# A node of the running cluster, by name: $1 is what the user gave, $2 what needs it.
check_node() {
    local name=$1 what=$2
    if ! [[ $name =~ ^node[0-9]$ ]] || [ "${name#node}" -ge $MAX_NODES ]; then
        fail "$what needs a node name, node0..node$((MAX_NODES - 1)), not '$name'"
    fi
    find_compose
    [ -n "$(compose ps -q "$name" 2>/dev/null)" ] || fail "$name is not part of cluster '$PROJECT'"
}

kill_node() {
    local name=${1:-}
    [ "$name" != node0 ] || fail "node0 runs the job's launcher and JupyterLab: kill another node"
    check_node "$name" kill
    say "killing $name (SIGKILL)"
    compose kill -s SIGKILL "$name"
}

case "${1:-}" in
    up) shift; up "$@" ;;
    scale) shift; scale "$@" ;;
    kill) shift; kill_node "$@" ;;
    down) down ;;
    ps) find_compose; compose ps ;;
    shell) find_compose; compose exec node0 bash ;;
    exec) shift; [ $# -gt 0 ] || fail "exec needs a command"; find_compose; compose exec -T node0 "$@" ;;
    on) shift; check_node "${1:-}" on; node=$1; shift
        [ $# -gt 0 ] || fail "on $node needs a command"; compose exec -T "$node" "$@" ;;
    *) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
