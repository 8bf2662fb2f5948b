"""`python -m byoc.dev`: what byoc-init runs for `docker run IMAGE` with no command."""

import sys

from byoc.dev.main import main

sys.exit(main())
