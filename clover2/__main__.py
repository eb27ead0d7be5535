"""`python -m clover2 ...` is the `clover2` command."""

import sys

from clover2.cli import main

sys.exit(main())
