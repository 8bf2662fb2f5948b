#!/usr/bin/env bash
# One rank of a parallel Horovod suite, as horovodrun or mpirun starts it (make test-horovod):
#   conformance-rank OUT_DIR PYTEST_ARGS...
# or the one process of a standalone suite, with CONFORMANCE_SINGLE=1 (it counts as rank 0).
# pytest writes its JUnit report to OUT_DIR/rank<R>.xml, this wrapper the exit status to
# OUT_DIR/rank<R>.rc (128+N: killed by signal N). It runs in OUT_DIR/rank<R>/ so a core dump of
# that rank lands there, one per rank.
set -u
out=${1:?usage: conformance-rank OUT_DIR PYTEST_ARGS...}
shift
if [ "${CONFORMANCE_SINGLE:-}" = 1 ]; then
    rank=0
    unset CONFORMANCE_SINGLE
else
    rank=${HOROVOD_RANK:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-}}}
fi
if [ -z "$rank" ]; then
    echo "conformance-rank: no HOROVOD_RANK, OMPI_COMM_WORLD_RANK or PMI_RANK (not started by a" \
         "launcher) and no CONFORMANCE_SINGLE=1" >&2
    exit 2
fi
mkdir -p "$out/rank$rank"
cd "$out/rank$rank" || exit 2
python -X faulthandler -m pytest -v --color=no -p no:cacheprovider --junitxml="$out/rank$rank.xml" "$@"
rc=$?
echo "$rc" >"$out/rank$rank.rc"
# Tests that failed (1) are judged from the reports; exiting 0 keeps horovodrun from ending the
# other ranks while they still write theirs. Anything else (a signal, an internal error) is passed on.
[ "$rc" -eq 1 ] && exit 0
exit "$rc"
