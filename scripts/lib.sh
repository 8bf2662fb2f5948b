# shellcheck shell=bash
# Sourced by the shell tools (from the repository root): one way to call Docker and one way to
# read the Dockerfile's pins, as the Python tools do (hostkit/docker.py, hostkit/dockerfile.py).

# docker_words TEXT: DOCKER_CMD, TEXT split on blanks (no quoting, as hostkit.docker splits it:
# DOCKER='sudo docker' works, a path with a blank does not).
docker_words() { read -r -a DOCKER_CMD <<<"$1"; }

# docker_init [DEFAULT]: DOCKER_CMD from $DOCKER, else DEFAULT, else docker; DOCKER exported as
# that, for the tools this one starts. Call it as `dk ARGS...`; xargs takes "${DOCKER_CMD[@]}".
docker_init() {
    local text=${DOCKER:-}
    [ -n "${text// /}" ] || text=${1:-docker}
    docker_words "$text"
    DOCKER=$text
    export DOCKER
}
dk() { "${DOCKER_CMD[@]}" "$@"; }

# pin NAME: the Dockerfile's default for ARG NAME, with the ARGs it uses expanded.
pin() { python3 -m hostkit.dockerfile "$1"; }
