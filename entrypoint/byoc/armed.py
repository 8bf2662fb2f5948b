"""`python -m byoc.armed SCRIPT [ARGS...]` (or `-m MODULE [ARGS...]`): run a Python program as
`python SCRIPT ARGS...` would, with its stack dump armed (byoc.stacks), so a stalled rank can say
where it is. The launchers run every Python rank through it (torchrun through byoc.clean_exit,
which arms the same way). The program ends as Python ends it, teardown included.
"""

from __future__ import annotations

import sys

from byoc import clean_exit, stacks


def main() -> None:
    argv = sys.argv[1:]
    if not argv or (argv[0] == "-m" and len(argv) < 2):
        print("usage: python -m byoc.armed SCRIPT [ARGS...] | -m MODULE [ARGS...]", file=sys.stderr)
        sys.exit(2)
    stacks.arm()
    sys.exit(clean_exit.run(argv))


if __name__ == "__main__":
    main()
