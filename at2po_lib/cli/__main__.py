"""``python -m at2po_lib.cli <command> ...``: the ``at2po`` command without the entry point."""

import sys

from . import main

sys.exit(main())
