#!/usr/bin/env bash
# What make targets need on this machine besides a Docker engine (scripts/docker.sh engine):
#   prereq.sh venv        a python3 that makes virtual environments: the dev venv (.venv) of
#                         make push, launch, lint, test-unit, sbom, k8s-validate, k8s-sim, lock
#   prereq.sh shellcheck  shellcheck, for make lint (so make test)
# Where one is missing: as root on Debian/Ubuntu it is installed from the distribution, as
# make engine installs Docker; elsewhere this says what to install and exits 1.
set -euo pipefail
SAY_AS=prereq.sh
# shellcheck source=scripts/lib.sh
. "$(dirname "$0")/lib.sh"

# has NAME: NAME works here (Debian's python3 has venv but no ensurepip without python3-venv).
has() {
    case $1 in
        venv) python3 -c 'import ensurepip, venv' >/dev/null 2>&1 ;;
        shellcheck) command -v shellcheck >/dev/null 2>&1 ;;
    esac
}

# need NAME PACKAGE ELSEWHERE: NAME works, installing Debian's PACKAGE as root; ELSEWHERE is the
# message where nothing can be installed.
need() {
    local rc=0
    has "$1" && return 0
    apt_install "$2" || rc=$?
    case $rc in
        0) has "$1" || fail "$2 was installed, yet $1 still does not work here" ;;
        1) fail "apt-get install $2 failed (see above)" ;;
        *) fail "$3" ;;
    esac
}

case "${1:-}" in
    venv) need venv python3-venv "python3 cannot make a virtual environment (no venv and ensurepip modules): install them (Debian/Ubuntu: 'sudo apt-get install python3-venv'; as root, make installs it), or put a python3 that has them first on PATH" ;;
    shellcheck) need shellcheck shellcheck "shellcheck is not installed: install it (Debian/Ubuntu: 'sudo apt-get install shellcheck'; as root, make installs it; Fedora: 'sudo dnf install ShellCheck'; macOS: 'brew install shellcheck')" ;;
    *) sed -n '2,7p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2 ;;
esac
