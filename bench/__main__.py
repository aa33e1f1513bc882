"""`python -m bench`: the benchmark harness (run from the repository root; see bench/README.md).

`python -m bench share [...]` runs the share-group bench instead (bench/share_bench.py: share groups of 1, 4
and 16 consumers beside a classic group on one partition, one broker process): it starts its own broker and
reports in its own table, so it is a command of its own rather than a workload of the harness's matrix.
"""

import sys

if len(sys.argv) > 1 and sys.argv[1] == "share":
    from .share_bench import main as share_main

    sys.exit(share_main(sys.argv[2:]))

from .harness import main

sys.exit(main())
