#!/usr/bin/env bash
# Docker helpers for the Makefile and .ci/run.
#   docker.sh client   print a Docker client that can run BuildKit builds (or print nothing and
#                      fail, saying why)
#   docker.sh engine   make sure an engine answers; as root on Debian/Ubuntu, install docker.io
#                      and start dockerd when none runs (its pid goes to $DOCKERD_PIDFILE)
#   docker.sh test-deps  docker-registry, docker compose and Chromium for the container tests
#   docker.sh ca       print the host's CA bundle for builds (PIP_CERT, SSL_CERT_FILE or
#                      REQUESTS_CA_BUNDLE, the first non-empty file), or nothing
set -euo pipefail
SAY_AS=docker.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

DOCKERD_PIDFILE=${DOCKERD_PIDFILE:-/tmp/pytorch-horovod-dockerd.pid}
DOCKERD_LOG=${DOCKERD_LOG:-/tmp/pytorch-horovod-dockerd.log}


# A client builds with BuildKit if it has the buildx plugin, or is older than 23.0 (BuildKit was
# built into the client until then). Docker 23+ without buildx refuses DOCKER_BUILDKIT=1.
# has_buildkit CMD...: the client CMD (a program and its leading words, as 'sudo docker').
has_buildkit() {
    local v
    command -v "$1" >/dev/null 2>&1 || return 1
    "$@" buildx version >/dev/null 2>&1 && return 0
    v=$("$@" version --format '{{.Client.Version}}' 2>/dev/null || "$@" --version 2>/dev/null | sed -E 's/^Docker version ([0-9]+).*/\1/')
    [ "${v%%.*}" -lt 23 ] 2>/dev/null
}

# $DOCKER as given (scripts/lib.sh splits it), else docker, else /usr/bin/docker.
client() {
    local c
    for c in "${DOCKER:-}" docker /usr/bin/docker; do
        docker_words "$c"
        [ ${#DOCKER_CMD[@]} -gt 0 ] || continue
        if has_buildkit "${DOCKER_CMD[@]}"; then
            echo "$c"
            return 0
        fi
    done
    say "no Docker client with BuildKit found: install the buildx plugin for your docker, or use a client that has BuildKit built in (Debian/Ubuntu docker.io), and pass it as DOCKER=/path/to/docker"
    return 1
}

engine_up() { docker_words "$1"; dk info >/dev/null 2>&1; }

engine() {
    local c
    c=$(client 2>/dev/null) || c=""
    if [ -n "$c" ] && engine_up "$c"; then return 0; fi
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        [ -n "$c" ] || { client >/dev/null; exit 1; }  # says what client is missing
        say "no Docker engine answers. Start one (e.g. 'sudo systemctl start docker', or Docker Desktop), or run as root on Debian/Ubuntu and this script starts one."
        exit 1
    fi
    # docker.io brings both an engine and a client with BuildKit built in (Docker 20.10): needed
    # when either is missing (a newer client without buildx cannot build this Dockerfile).
    if [ -z "$c" ] || { ! command -v dockerd >/dev/null 2>&1 && [ ! -x /usr/sbin/dockerd ]; }; then
        say "installing docker.io from the distribution"
        apt-get update -qq
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends docker.io >/dev/null
        c=$(client) || exit 1
        engine_up "$c" && return 0
    fi
    local dockerd
    dockerd=$(command -v dockerd || echo /usr/sbin/dockerd)
    say "starting $dockerd (log: $DOCKERD_LOG)"
    # setsid: the engine outlives this make target; `docker.sh stop` ends it.
    setsid "$dockerd" >"$DOCKERD_LOG" 2>&1 < /dev/null &
    echo $! >"$DOCKERD_PIDFILE"
    for _ in $(seq 1 60); do
        engine_up "$c" && { say "engine up"; return 0; }
        sleep 1
    done
    say "dockerd did not answer within 60 s; see $DOCKERD_LOG"
    exit 1
}

stop() {
    [ -f "$DOCKERD_PIDFILE" ] || return 0
    local pid
    pid=$(cat "$DOCKERD_PIDFILE")
    if kill "$pid" 2>/dev/null; then
        say "stopping the dockerd this script started (pid $pid)"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
    fi
    rm -f "$DOCKERD_PIDFILE"
}

# What the container tests drive besides the engine: docker-registry (test_push.py), a compose
# (test_cluster.py) and a headless browser (test_notebook.py: Chromium and chromedriver, from
# Debian only: Ubuntu's chromium package is a snap, which does not run here). As root on
# Debian/Ubuntu they are installed; elsewhere, say how.
test_deps() {
    local missing=()
    command -v docker-registry >/dev/null 2>&1 || missing+=(docker-registry)
    if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
        missing+=(docker-compose)
    fi
    if ! command -v chromedriver >/dev/null 2>&1; then
        if grep -qx 'ID=debian' /etc/os-release 2>/dev/null; then
            missing+=(chromium chromium-driver)
        else
            say "no chromedriver: install Chromium and its chromedriver for the browser test (it skips saying so)"
        fi
    fi
    [ ${#missing[@]} -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null 2>&1; then
        say "missing for the container tests: ${missing[*]} (install them; those tests skip saying so)"
        return 0
    fi
    say "installing ${missing[*]} from the distribution"
    apt-get update -qq
    # The tests start their own registry on a free loopback port: the package's service (port
    # 5000) must not start, now or at boot. policy-rc.d 101 tells the maintainer scripts so.
    local policy=/usr/sbin/policy-rc.d made="" rc=0
    if [ ! -e "$policy" ]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy" && made=1
    fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || rc=$?
    [ -n "$made" ] && rm -f "$policy"
    if command -v systemctl >/dev/null 2>&1; then
        systemctl disable --now docker-registry >/dev/null 2>&1 || true
    fi
    [ "$rc" = 0 ] || { say "apt-get install ${missing[*]} failed ($rc)"; exit 1; }
}

ca_bundle() {
    local ca
    for ca in "${PIP_CERT:-}" "${SSL_CERT_FILE:-}" "${REQUESTS_CA_BUNDLE:-}"; do
        if [ -n "$ca" ] && [ -s "$ca" ]; then echo "$ca"; return 0; fi
    done
}

case "${1:-}" in
    ca) ca_bundle ;;
    client) client ;;
    engine) engine ;;
    stop) stop ;;
    test-deps) test_deps ;;
    *) echo "usage: $0 client|engine|stop|test-deps|ca" >&2; exit 2 ;;
esac
