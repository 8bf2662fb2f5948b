"""Print the git commit a tarball records (git archive's pax header), as git get-tar-commit-id."""

import sys
import tarfile

with tarfile.open(sys.argv[1]) as tar:
    commit = tar.pax_headers.get("comment", "")
if len(commit) != 40:
    sys.exit(1)
print(commit)
