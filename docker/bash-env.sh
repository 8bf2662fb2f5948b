# shellcheck shell=bash
# The image's BASH_ENV: every non-interactive bash reads this first.
#
# A platform that replaces the image's ENTRYPOINT with bash (SageMaker SDK v3's ModelTrainer runs
# `bash -c "... sm_train.sh"`; Kubernetes `command: [bash, -c, ...]`) makes bash PID 1: no signal
# forwarding, no reaping, none of byoc-init's start-up. Then, once, run the same command under
# byoc-init instead, with the options it was started with (-e, -u, -o pipefail, ...). Anything
# else (bash under byoc-init, scripts, ssh sessions) falls through.
if [ "$$" = 1 ] && [ -z "${BYOC_INIT:-}" ] && [ -x /opt/venv/bin/byoc-init ]; then
    byoc_opts=()
    for byoc_opt in errexit nounset pipefail xtrace noglob noclobber allexport errtrace functrace; do
        if [[ -o $byoc_opt ]]; then byoc_opts+=(-o "$byoc_opt"); fi
    done
    if [ -n "${BASH_EXECUTION_STRING:-}" ]; then
        exec /opt/venv/bin/byoc-init /bin/bash "${byoc_opts[@]}" -c "$BASH_EXECUTION_STRING" "$0" "$@"
    elif [ -f "$0" ]; then
        exec /opt/venv/bin/byoc-init /bin/bash "${byoc_opts[@]}" "$0" "$@"
    fi
    unset byoc_opts byoc_opt
fi
