"""`python -m bench`: the benchmark harness (run from the repository root; see bench/README.md)."""

import sys

from .harness import main

sys.exit(main())
