import sys

from odradek.cli import main

sys.exit(main())
