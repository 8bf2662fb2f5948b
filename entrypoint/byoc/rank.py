"""Run one rank's program with this host's own SM_CURRENT_HOST.

horovodrun forwards the leader's environment to every rank, so ranks on worker hosts would see
the leader's SM_CURRENT_HOST (and SM_CURRENT_HOST_RANK); this wrapper, run on each rank's host,
reads that host's own resourceconfig.json, fixes them, then execs the program.
"""

from __future__ import annotations

import json
import os
import sys

from byoc import config
from byoc import constants as C


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: python -m byoc.rank PROGRAM [ARGS...]", file=sys.stderr)
        return 2
    try:
        resource = json.loads((config.ml_root() / C.RESOURCE_CONFIG).read_text())
        me = resource["current_host"]
        os.environ[C.SM_CURRENT_HOST] = me
        hosts = sorted(resource["hosts"], key=config.natural_key)
        os.environ[C.SM_CURRENT_HOST_RANK] = str(hosts.index(me))
    except (OSError, ValueError, KeyError, TypeError):
        pass  # keep what was forwarded: better than failing the rank
    os.execvp(argv[0], argv)
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
