"""Run one rank's program with this host's own per-host SM_* variables.

horovodrun forwards the leader's environment to every rank, so ranks on other hosts would see the
leader's SM_CURRENT_HOST, instance type, group, GPU count, resource config and SM_TRAINING_ENV's
fields of them; this wrapper, run on each rank's host, recomputes them from that host's own
contract (byoc.environment.for_this_host), then execs the program. The job's variables (hosts,
hyperparameters, channels, the master) stay as forwarded.
"""

from __future__ import annotations

import os
import sys

from byoc import config, environment, plan


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m byoc.rank PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    try:
        cfg = config.load()
    except config.ConfigError as exc:
        # Keep what was forwarded: the leader read the same job; better than failing the rank.
        print(f"byoc.rank: this host's own variables not set: {exc}", file=sys.stderr)
    else:
        own = environment.for_this_host(
            dict(os.environ), cfg, num_gpus=plan.count_gpus(), num_cpus=os.cpu_count() or 1
        )
        os.environ.update(own)
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
