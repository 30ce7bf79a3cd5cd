"""``python -m at2po_lib.tinyworld --profile tiny`` (same as ``at2po world``)."""

import sys

from .build import main

sys.exit(main())
