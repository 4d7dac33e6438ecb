"""`python -m chunkeval.cli`, as the installed `chunkeval` command."""

import sys

from chunkeval.cli.main import main

sys.exit(main())
