"""`python -m chunkeval.cli`: the `chunkeval` command."""

import sys

from chunkeval.cli.main import main

sys.exit(main())
