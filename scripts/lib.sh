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
# repository root: python -m finds hostkit there). PY: the dev venv's python, which make exports;
# python3 where a script runs alone.
pin() { "${PY:-python3}" -m hostkit.dockerfile "$1"; }

# default_flavor: gpu where an NVIDIA GPU is visible, else cpu: the flavor the Makefile and the
# shell tools take when FLAVOR is not given. Visible means nvidia-smi lists one: the driver's
# user space answers, which a container of the gpu flavor needs (a /dev/nvidia0 alone does not
# show that); the same test as make nccl-test and cluster.sh's GPU blocks.
default_flavor() {
    if timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then echo gpu; else echo cpu; fi
}

# build_command REF: the make command that builds image REF (NAME:TAG) here; its flavor is
# FLAVOR, else the tag where that names one, else this machine's.
build_command() {
    local name=${1%:*} tag=${1##*:} flavor=${FLAVOR:-}
    [[ $1 == *:* && $tag != */* ]] || { name=$1 tag=latest; }
    if [ -z "$flavor" ]; then
        case $tag in cpu | gpu) flavor=$tag ;; *) flavor=$(default_flavor) ;; esac
    fi
    [ "$name" != pytorch-horovod ] || name=""  # the Makefile's IMAGE
    echo "make build FLAVOR=$flavor TAG=$tag${name:+ IMAGE=$name}"
}

# apt_install PACKAGE...: as root on Debian/Ubuntu, install them from the distribution (status 0,
# or 1 when apt-get fails); elsewhere status 2, nothing tried: the caller says what to install.
apt_install() {
    [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || return 2
    say "installing $* from the distribution"
    apt-get update -qq || return 1
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}
