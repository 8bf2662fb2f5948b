# shellcheck shell=bash
# Sourced by the shell tools: one way to call Docker and one way to read the Dockerfile's pins,
# as the Python tools do (hostkit/docker.py, hostkit/dockerfile.py), and one way to speak.

# say MESSAGE / fail MESSAGE: on stderr, named by SAY_AS (set it before sourcing this; default: the
# script's name without .sh); fail exits FAIL_STATUS (default 1), as hostkit.Teller does.
say() { echo "${SAY_AS:-$(basename "$0" .sh)}: $*" >&2; }
fail() { echo "${SAY_AS:-$(basename "$0" .sh)}: error: $*" >&2; exit "${FAIL_STATUS:-1}"; }

# docker_words TEXT: DOCKER_CMD, TEXT split on blanks (no quoting, as hostkit.docker splits it:
# DOCKER='sudo docker' works, a path with a blank does not).
docker_words() { read -r -a DOCKER_CMD <<<"$1"; }

# docker_init [build|build-or-docker]: DOCKER_CMD from $DOCKER; where DOCKER is unset or blank,
# docker, or for `build` the client scripts/docker.sh finds (one that runs BuildKit builds; none:
# exit 1, it says why), or for `build-or-docker` that client else docker. DOCKER is exported
# as chosen, for the tools this one starts. Call it as `dk ARGS...` (`dk_build ARGS...` for a
# build); xargs takes "${DOCKER_CMD[@]}".
docker_init() {
    local text=${DOCKER:-} here
    here=$(dirname "${BASH_SOURCE[0]}")
    if [ -z "${text// /}" ]; then
        case "${1:-}" in
            build) text=$("$here/docker.sh" client) || exit 1 ;;
            build-or-docker) text=$("$here/docker.sh" client 2>/dev/null) || text=docker ;;
            *) text=docker ;;
        esac
    fi
    docker_words "$text"
    DOCKER=$text
    export DOCKER
}
dk() { "${DOCKER_CMD[@]}" "$@"; }

# dk_build ARGS...: `docker build` with BuildKit. DOCKER_BUILDKIT=1 (which Docker < 23 needs)
# must reach the docker program itself, also through a wrapper that resets the environment
# (sudo): `env DOCKER_BUILDKIT=1` goes right before the program (hostkit.docker does the same).
dk_build() {
    local i=0 n=${#DOCKER_CMD[@]}
    while [ "$i" -lt $((n - 1)) ]; do
        case "${DOCKER_CMD[$i]##*/}" in docker*) break ;; esac
        i=$((i + 1))
    done
    "${DOCKER_CMD[@]:0:i}" env DOCKER_BUILDKIT=1 "${DOCKER_CMD[@]:i}" build "$@"
}

# pin NAME: the Dockerfile's default for ARG NAME, with the ARGs it uses expanded (run from the
# repository root: python3 -m finds hostkit there).
pin() { python3 -m hostkit.dockerfile "$1"; }
